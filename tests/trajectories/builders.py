"""Trajectories written the way production writes them: gateway step records through `steps_ingest`
(the shape of apps.gateway.recording.StepDraft.to_record) and agent-logged ATDP records through
`trajectory_import`."""

import uuid
from datetime import timedelta

from django.utils import timezone

from apps.audit.services import Actor
from apps.loop.importing import trajectory_import
from apps.trajectories import services
from apps.trajectories.models import Trajectory, trajectory_id_for
from tests.workers.atdp.fixtures import make_reward, make_trajectory

SERVED_MODEL = "policy-small"


def gateway_step(
    tenant,
    session_id: str,
    *,
    prompt_ids=(1, 2, 3),
    completion_ids=(4, 5),
    logprobs=None,
    policy_version: int = 3,
    created_at=None,
    **overrides,
) -> dict:
    """One journalled llm_call as the gateway records it (consent full, PII off)."""
    completion_ids = list(completion_ids)
    logprobs = (
        list(logprobs) if logprobs is not None else [-0.25 * (i + 1) for i in range(len(completion_ids))]
    )
    created_at = created_at or timezone.now()
    record = {
        "step_id": str(uuid.uuid4()),
        "tenant_id": tenant.pk,
        "session_id": session_id,
        "api_key_prefix": "ak_test",
        "task_id": "",
        "group_id": "",
        "purpose": "production",
        "consent": "full",
        "agent_name": "",
        "agent_version": "",
        "created_at": created_at.isoformat(),
        "retention_until": (created_at + timedelta(days=30)).isoformat(),
        "parent_step_id": None,
        "retry_of": None,
        "kind": "llm_call",
        "endpoint": "chat.completions",
        "served_model": SERVED_MODEL,
        "model_version": "1",
        "policy_version": policy_version,
        "backend_name": "replica-0",
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(completion_ids),
        "latency_ms": 40,
        "ttft_ms": None,
        "cost_usd": 0.000125,
        "scopes": ["inference"],
        "aborted": False,
        "error": "",
        "result": {"finish_reason": "stop", "error": None},
        "observation": {
            "messages": [{"role": "user", "content": "Name a colour"}],
            "prompt": None,
            "tools": None,
            "params": {"max_tokens": 8, "temperature": 0},
        },
        "action": {
            "message": {"role": "assistant", "content": "Blue", "tool_calls": None},
            "tool_calls": [],
            "text": "Blue",
        },
        "state": {},
        "pii_entities": [],
        "tokenizer": SERVED_MODEL,
        "tokens": {
            "prompt_ids": list(prompt_ids),
            "completion_ids": completion_ids,
            "completion_logprobs": logprobs,
            "completion_versions": [policy_version] * len(completion_ids),
        },
    }
    record.update(overrides)
    return record


def ingested(tenant, session_id: str, records: list[dict]) -> Trajectory:
    """Ingests gateway step records of one session and returns its trajectory."""
    services.steps_ingest(records=records)
    return Trajectory.objects.get(pk=trajectory_id_for(tenant_id=tenant.pk, session_id=session_id))


def atdp_record(tenant, session_id: str, *, rewards: list[float] | None = None, **overrides) -> dict:
    """A valid ATDP record of `tenant` (make_trajectory's tool-using weather agent). `rewards`: values of
    trajectory-level rewards replacing the fixture's, each with its own idempotency key."""
    record = make_trajectory(tenant=tenant.slug, session_id=session_id, **overrides)
    for reward in record["rewards"]:
        if reward["idempotency_key"]:
            reward["idempotency_key"] = f"{session_id}:{reward['idempotency_key']}"
    if rewards is not None:
        record["rewards"] = [
            make_reward(value=value, idempotency_key=f"{session_id}:{position}")
            for position, value in enumerate(rewards)
        ]
    if record["status"] == "open":
        record["ended_at"] = None
    return record


def imported(tenant, session_id: str, **overrides) -> Trajectory:
    """Stores an ATDP record through trajectory_import (the service behind the import API)."""
    return trajectory_import(
        tenant=tenant, record=atdp_record(tenant, session_id, **overrides), actor=Actor.system("test")
    )
