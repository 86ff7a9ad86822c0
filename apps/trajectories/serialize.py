"""Rows → ATDP v1 JSON (docs/atdp/v1.schema.json)."""

from apps.trajectories.models import Step, Trajectory
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions

ATDP_VERSION = "1.0"
RESULT_FIELDS = ("finish_reason", "tool_results", "error", "user_outcome")


def _time(moment) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _tokens(step: Step) -> dict | None:
    if step.completion_ids is None:
        return None
    return {
        "tokenizer": step.tokenizer or step.served_model,
        "prompt_ids": unpack_ids(bytes(step.prompt_ids)),
        "completion_ids": unpack_ids(bytes(step.completion_ids)),
        "completion_logprobs": unpack_floats(bytes(step.completion_logprobs)),
        "completion_versions": unpack_versions(bytes(step.completion_versions)),
        "loss_mask": None,
        "retokenized": step.retokenized,
    }


def _result(step: Step) -> dict:
    """The schema's result keys only. The gateway records a failed or aborted call's reason as text (and
    the step's `aborted` flag); ATDP wants an error object. A retry is told by the tree (a retry shares
    its original's parent), so `retry_of` is not repeated here."""
    stored = step.result or {}
    result = {key: stored[key] for key in RESULT_FIELDS if key in stored}
    error = result.get("error")
    if isinstance(error, str) or (error is None and (step.aborted or step.error)):
        result["error"] = {"type": "aborted" if step.aborted else "error", "message": error or step.error}
    return result


def step_to_atdp(step: Step) -> dict:
    observation = step.observation or {}
    action = step.action or {}
    return {
        "step_id": str(step.id),
        "index": step.index,
        "parent_step_id": str(step.parent_step_id) if step.parent_step_id else None,
        "kind": step.kind,
        "observation": {
            "messages": observation.get("messages") or [],
            "tools": observation.get("tools") or [],
            "params": observation.get("params") or {},
        },
        "state": step.state or {},
        "action": {
            "message": action.get("message"),
            "tool_calls": action.get("tool_calls") or [],
            "text": action.get("text"),
        },
        "result": _result(step),
        "tokens": _tokens(step),
        "versions": {
            "model_version": step.model_version or None,
            "policy_version": step.policy_version,
            "tools": dict((step.state or {}).get("tool_versions") or {}),  # the harness's (apps.evolution)
            "prompt_version": (step.state or {}).get("prompt_version") or None,
            "gateway": "areal-web/1",
        },
        "cost": {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "latency_ms": step.latency_ms,
            "ttft_ms": step.ttft_ms,
            "usd": float(step.cost_usd),
        },
        "permissions": {"scopes": step.scopes, "data_class": "internal"},
        "pii": {"redacted": bool(step.pii_entities), "entities": step.pii_entities},
        "replayable": "approximate" if step.kind == "llm_call" else "non_replayable",
        "created_at": _time(step.created_at),
    }


def reward_to_atdp(reward) -> dict:
    return {
        "reward_id": str(reward.id),
        "target": reward.target,
        "step_id": str(reward.step_id) if reward.step_id else None,
        "value": reward.value,
        "kind": reward.kind,
        "label": reward.label or None,
        "source": reward.source,
        "timing": reward.timing,
        "created_by": reward.created_by,
        "created_at": _time(reward.created_at),
        "idempotency_key": reward.idempotency_key,
    }


def trajectory_to_atdp(trajectory: Trajectory, steps, rewards) -> dict:
    return {
        "atdp_version": ATDP_VERSION,
        "trajectory_id": str(trajectory.id),
        "session_id": trajectory.session_id,
        "tenant": trajectory.tenant.slug,
        "agent": {"name": trajectory.agent_name, "version": trajectory.agent_version or None},
        "task_id": trajectory.task_id or None,
        "group_id": trajectory.group_id or None,
        "status": trajectory.status,
        "purpose": trajectory.purpose,
        "started_at": _time(trajectory.started_at),
        "ended_at": _time(trajectory.ended_at),
        "steps": [step_to_atdp(step) for step in steps],
        "rewards": [reward_to_atdp(reward) for reward in rewards],
        "governance": {
            "consent": trajectory.consent,
            "data_class": trajectory.data_class,
            "retention_until": _time(trajectory.retention_until),
            "review": {"status": "unreviewed", "reviewer": None, "at": None, "note": None},
            "qualification": {"status": "pending", "reasons": [], "at": None},
            "training_use": trajectory.training_use,
        },
        "cost": {
            "prompt_tokens": trajectory.prompt_tokens,
            "completion_tokens": trajectory.completion_tokens,
            "latency_ms": trajectory.latency_ms,
            "ttft_ms": None,
            "usd": float(trajectory.cost_usd),
        },
    }
