"""What every way of storing a reward shares: the reward's idempotency scope (its source and principal),
the source a principal may name, the check against a reward spec, the tenant's late-reward window, the
insert that answers an idempotent repeat with the first reward, and the follow-ups it enqueues. Rewards are
never edited: a repeat of the same key in the same scope stores nothing."""

import uuid
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.services import Actor
from apps.core.errors import Forbidden, Gone, NotFound
from apps.core.tasking import task_enqueue_on_commit
from apps.rewards.errors import RewardRejected
from apps.rewards.models import Reward, RewardKind, RewardSource, RewardSpec
from apps.rewards.selectors import reward_spec_for, spec_data
from apps.trajectories.selectors import trajectory_ended_at
from workers.rewards.specs import check_reward


def _as_uuid(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(
            f"no {what} {value!r} in this tenant", code=f"{what.replace(' ', '_')}_not_found"
        ) from None


def _payload(reward: Reward, *, created: bool) -> dict:
    return {
        "reward_id": str(reward.id),
        "target": reward.target,
        "trajectory_id": str(reward.trajectory_id),
        "step_id": str(reward.step_id) if reward.step_id else None,
        "value": reward.value,
        "kind": reward.kind,
        "label": reward.label or None,
        "spec": reward.spec.name if reward.spec else None,
        "source": reward.source,
        "timing": reward.timing,
        "created": created,
    }


def _enqueue_follow_ups(reward: Reward) -> None:
    """A new reward can change the trajectory's qualification: its gates re-run once this commits (the task
    apps.qualification runs, by name: qualification sits above rewards)."""
    task_enqueue_on_commit("qualification.evaluate", str(reward.trajectory_id))


# What a machine key may name as a reward's source (the gateway and REST alike); `agent` by default.
# `annotator` comes only from a person's session, `evaluator` only from the evaluator workers.
KEY_SOURCES = (RewardSource.AGENT, RewardSource.USER, RewardSource.ENVIRONMENT, RewardSource.RULE)
EVALUATOR_PRINCIPAL = "worker"


def idempotency_scope(*, source: str, principal: str) -> str:
    """The namespace of a reward's idempotency key: its source and who wrote it (`key:<prefix>`,
    `user:<id>`, `worker` for evaluators, `system:<label>`). A key is unique within its scope only, so
    nobody can claim, or read back through a repeat, the key another source or principal will use."""
    return f"{source}/{principal}"


def _source_for(*, actor: Actor, requested: str | None) -> tuple[str, str]:
    """(source, scope) of a reward written by `actor`: the source follows the principal, never the body.
    A key names one of KEY_SOURCES (default agent); a person's session posts as annotator; internal
    callers (system actors) name theirs. Any other source is refused (403 `source_not_allowed`)."""
    allowed: tuple[str, ...]
    if actor.kind == "api_key":
        allowed, principal = KEY_SOURCES, f"key:{actor.label}"
    elif actor.kind == "user":
        allowed, principal = (RewardSource.ANNOTATOR,), f"user:{actor.id}"
    else:
        source = requested or RewardSource.AGENT
        return source, idempotency_scope(source=source, principal=f"system:{actor.label}")
    source = requested or allowed[0]
    if source not in allowed:
        who = "an API key" if actor.kind == "api_key" else "a person's session"
        raise Forbidden(
            f"{who} may not post a reward with source {source!r}; it may post {', '.join(allowed)}",
            code="source_not_allowed",
            fields={"source": list(allowed)},
        )
    return source, idempotency_scope(source=source, principal=principal)


def _existing(tenant_id: int, scope: str, idempotency_key: str | None) -> Reward | None:
    if not idempotency_key:
        return None
    return (
        Reward.objects.select_related("spec")
        .filter(tenant_id=tenant_id, idempotency_scope=scope, idempotency_key=idempotency_key)
        .first()
    )


def _checked(
    *, tenant_id: int, agent_name: str, spec_name: str, kind: str | None, value: float | None, label: str
) -> tuple[RewardSpec | None, str, float, str]:
    """(spec, kind, value, label) after checking against the named spec or the agent's training spec.
    An unnamed critique is not held to a scored training spec: corrections are free text."""
    spec = reward_spec_for(tenant_id=tenant_id, agent_name=agent_name, name=spec_name)
    if (
        spec is not None
        and not spec_name
        and (kind == RewardKind.CRITIQUE) != (spec.kind == RewardKind.CRITIQUE)
    ):
        spec = None
    if spec is None:
        kind = kind or RewardKind.NUMERIC
        if kind != RewardKind.CRITIQUE and value is None:
            raise RewardRejected(
                "a value is required", code="invalid_request", fields={"value": ["required"]}
            )
        if kind == RewardKind.CRITIQUE and not label.strip():
            raise RewardRejected(
                "a critique needs its text as label (or comment)",
                code="invalid_request",
                fields={"label": ["required"]},
            )
        return None, kind, 0.0 if value is None else float(value), label
    kind = kind or spec.kind
    checked = check_reward(spec_data(spec), kind=kind, value=value, label=label)
    if not checked.ok:
        raise RewardRejected(checked.problem, fields={"spec": [spec.name]})
    return spec, kind, checked.value, checked.label


def _refuse_after_window(*, tenant_id: int, trajectory_id) -> None:
    """A session that ended more than the tenant's `late_reward_hours` ago takes no more rewards (410)."""
    from apps.tenants.models import TenantPolicy

    ended_at = trajectory_ended_at(tenant_id=tenant_id, trajectory_id=trajectory_id)
    if ended_at is None:
        return
    hours = (
        TenantPolicy.objects.filter(tenant_id=tenant_id).values_list("late_reward_hours", flat=True).first()
    )
    if hours is not None and timezone.now() - ended_at > timedelta(hours=hours):
        raise Gone(
            f"the session ended at {ended_at:%Y-%m-%d %H:%M} UTC, more than this tenant's late-reward window of "
            f"{hours} h ago",
            code="reward_window_closed",
        )


def _store(
    *, tenant_id: int, idempotency_scope: str, idempotency_key: str | None, **fields
) -> tuple[Reward, bool]:
    if not fields.get("is_override"):
        _refuse_after_window(tenant_id=tenant_id, trajectory_id=fields["trajectory_id"])
    try:
        with transaction.atomic():
            reward = Reward.objects.create(
                tenant_id=tenant_id,
                idempotency_scope=idempotency_scope,
                idempotency_key=idempotency_key,
                **fields,
            )
    except IntegrityError:
        existing = _existing(tenant_id, idempotency_scope, idempotency_key)
        if existing is None:
            raise
        return existing, False
    _enqueue_follow_ups(reward)
    return reward, True
