"""Rows → ATDP v1 JSON (docs/atdp/v1.schema.json).

A step this gateway recorded derives `versions.tools` and `versions.prompt_version` from its `state` (where
the gateway records the harness's, apps.gateway.recording) and reports this gateway, `internal` data and
its kind's replayability. An imported step reports those fields as its record gave them
(`Step.imported_fields`), so an export of an import says what the import said."""

from typing import cast

from apps.trajectories.models import Step, Trajectory
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions

ATDP_VERSION = "1.0"
GATEWAY = "areal-web/1"
RESULT_FIELDS = ("finish_reason", "tool_results", "error", "user_outcome")
UNREVIEWED: dict = {"status": "unreviewed", "reviewer": None, "at": None, "note": None}
PENDING: dict = {"status": "pending", "reasons": [], "at": None}


def _time(moment) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _tokens(step: Step) -> dict | None:
    if step.completion_ids is None:
        return None
    return {
        "tokenizer": step.tokenizer or step.served_model,
        # A step with completion ids has its prompt ids, logprobs and versions too (steps_ingest writes them
        # together); the columns are nullable only for the steps that carry no tokens.
        "prompt_ids": unpack_ids(bytes(cast(bytes, step.prompt_ids))),
        "completion_ids": unpack_ids(bytes(step.completion_ids)),
        "completion_logprobs": unpack_floats(bytes(cast(bytes, step.completion_logprobs))),
        "completion_versions": unpack_versions(bytes(cast(bytes, step.completion_versions))),
        "loss_mask": unpack_versions(bytes(step.loss_mask)) if step.loss_mask is not None else None,
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


def _versions(step: Step) -> dict:
    state = step.state or {}
    versions = {
        "model_version": step.model_version or None,
        "policy_version": step.policy_version,
        "tools": dict(state.get("tool_versions") or {}),  # the harness's (apps.evolution)
        "prompt_version": state.get("prompt_version") or None,
        "gateway": GATEWAY,
    }
    versions.update((step.imported_fields or {}).get("versions") or {})
    return versions


def step_to_atdp(step: Step) -> dict:
    observation = step.observation or {}
    action = step.action or {}
    imported = step.imported_fields or {}
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
        "versions": _versions(step),
        "cost": {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "latency_ms": step.latency_ms,
            "ttft_ms": step.ttft_ms,
            "usd": float(step.cost_usd),
        },
        "permissions": {"scopes": step.scopes, "data_class": imported.get("data_class", "internal")},
        "pii": {
            "redacted": imported.get("pii_redacted", bool(step.pii_entities)),
            "entities": step.pii_entities,
        },
        "replayable": imported.get(
            "replayable", "approximate" if step.kind == "llm_call" else "non_replayable"
        ),
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


def review_to_atdp(review) -> dict:
    """The current review (the newest `apps.qualification` Review), or unreviewed without one."""
    if review is None:
        return dict(UNREVIEWED)
    return {
        "status": review.status,
        "reviewer": review.reviewer_label or None,
        "at": _time(review.created_at),
        "note": review.note or None,
    }


def qualification_to_atdp(qualification) -> dict:
    """The effective verdict (`apps.qualification` Qualification: the gates', or an operator's override,
    `at` the time of whichever decided), or pending before the gates ran."""
    if qualification is None:
        return dict(PENDING, reasons=[])
    decided_at = qualification.overridden_at if qualification.override_status else qualification.evaluated_at
    return {
        "status": qualification.status,
        "reasons": list(qualification.reasons),
        "at": _time(decided_at),
    }


def trajectory_record(trajectory: Trajectory) -> dict:
    """The ATDP record of a trajectory read through `selectors.trajectory_with_records` (its steps, rewards,
    reviews and verdict prefetched for its tenant)."""
    reviews = trajectory.reviews_newest_first  # type: ignore[attr-defined]  # the selector's Prefetch(to_attr=)
    return trajectory_to_atdp(
        trajectory,
        trajectory.steps.all(),
        trajectory.rewards.all(),
        review=reviews[0] if reviews else None,
        qualification=trajectory.tenant_qualification,  # type: ignore[attr-defined]  # likewise
    )


def trajectory_to_atdp(trajectory: Trajectory, steps, rewards, *, review=None, qualification=None) -> dict:
    """`review` and `qualification`: the trajectory's current review and verdict rows (unreviewed and
    pending without them)."""
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
            "review": review_to_atdp(review),
            "qualification": qualification_to_atdp(qualification),
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
