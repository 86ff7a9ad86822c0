"""Appending and setting rewards: the gateway's paths (`/v1/rewards`, and the session endpoints' reward that a
new value replaces), the REST API's and console's (an operator's override is a new reward marked as such,
audited), and the rewards of an imported trajectory."""

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from apps.rewards.models import Reward, RewardSource, RewardTarget, RewardTiming
from apps.rewards.selectors import (
    SET_REWARD_SCOPE,
    reward_session_target,
    set_reward_current,
    set_reward_number,
    set_reward_target,
)
from apps.rewards.services.storing import (
    KEY_SOURCES,
    _as_uuid,
    _checked,
    _existing,
    _payload,
    _source_for,
    _store,
    idempotency_scope,
)
from apps.tenants.models import Tenant
from apps.trajectories.selectors import step_exists, step_with_agent_name, trajectory_agent

if TYPE_CHECKING:
    from apps.trajectories.models import Trajectory


def reward_append_for_agent(
    *,
    tenant_id: int,
    session_id: str | None,
    step_id: str | None,
    value: float | None,
    kind: str | None,
    source: str,
    label: str,
    idempotency_key: str | None,
    timing: str,
    created_by: str,
    spec_name: str = "",
) -> dict:
    """The gateway's reward path (/v1/rewards). Binds the reward to a step (step_id / interaction_id: the
    step's own trajectory) or to a session's newest trajectory (`selectors.reward_session_target`: the live
    continuation once the session went on after its trajectory ended), inside the tenant only: another
    tenant's target is not found (404). Checks it against the named spec or the agent's training spec (422 naming the spec).
    Returns the reward as a dict with `created` telling a new reward from an idempotent repeat.
    `created_by` is the calling key's prefix: the source must be one a key may name (KEY_SOURCES, else 403
    `source_not_allowed`) and the idempotency key is namespaced by source and that key.
    Enqueues the trajectory's qualification on commit."""
    if source not in KEY_SOURCES:
        raise Forbidden(
            f"an API key may not post a reward with source {source!r}",
            code="source_not_allowed",
            fields={"source": list(KEY_SOURCES)},
        )
    scope = idempotency_scope(source=source, principal=f"key:{created_by}")
    existing = _existing(tenant_id, scope, idempotency_key)
    if existing:
        return _payload(existing, created=False)
    agent_name: str | None
    if step_id:
        step = step_with_agent_name(tenant_id=tenant_id, step_id=_as_uuid(step_id, "step"))
        if step is None:
            raise NotFound(f"no step {step_id!r} in this tenant", code="step_not_found")
        target, trajectory_id, bound_step = RewardTarget.STEP, step["trajectory_id"], step["id"]
        agent_name = step["agent_name"]
    elif not session_id:  # the gateway asks for exactly one of the two
        raise NotFound(f"no session {session_id!r} in this tenant", code="session_not_found")
    else:
        session = reward_session_target(tenant_id=tenant_id, session_id=session_id)
        if session is None:
            raise NotFound(f"no session {session_id!r} in this tenant", code="session_not_found")
        trajectory_id, agent_name = session.trajectory_id, session.agent_name
        target, bound_step = RewardTarget.TRAJECTORY, None
    spec, kind, value, label = _checked(
        tenant_id=tenant_id, agent_name=agent_name, spec_name=spec_name, kind=kind, value=value, label=label
    )
    reward, created = _store(
        tenant_id=tenant_id,
        idempotency_scope=scope,
        idempotency_key=idempotency_key,
        trajectory_id=trajectory_id,
        step_id=bound_step,
        target=target,
        value=value,
        kind=kind,
        label=label,
        source=source,
        timing=timing,
        created_by=created_by,
        spec=spec,
    )
    return _payload(reward, created=created)


SET_REWARD_ATTEMPTS = 5


def reward_set_for_interaction(
    *, tenant_id: int, trajectory_id, step_id: str | None, value: float, timing: str, created_by: str
) -> dict:
    """The session endpoints' reward (AReaL's `/rl/set_reward`, `/rl/end_session`'s `final_reward`): the
    agent's reward for one interaction (`step_id`, a step of the trajectory) or, without a step, for the
    trajectory. Tenancy: the trajectory must be `tenant_id`'s (404 otherwise); the gateway has checked that
    the session is the caller's and the step one of its own.
    Idempotent: the same value again for the same target stores nothing and returns the current reward
    (`created` false), so a client's retry never adds a second reward. A different value replaces the
    current one: a new reward whose `reason` names the one it replaces, audited `reward.replace`; the
    replaced reward stays stored and no longer counts (`selectors.training_rewards`). Rewards live in their
    own namespace (`SET_REWARD_SCOPE`, key `<target>#<n>`): concurrent calls for one target are ordered by
    the unique key of their number, the loser looks again. Checked against the agent's training spec (422
    naming it). Enqueues the trajectory's qualification on commit."""
    trajectory = trajectory_agent(tenant_id=tenant_id, trajectory_id=trajectory_id)
    if trajectory is None:
        raise NotFound("no such session in this tenant", code="session_not_found")
    agent_name = trajectory["agent_name"]
    spec, kind, value, label = _checked(
        tenant_id=tenant_id, agent_name=agent_name, spec_name="", kind="numeric", value=value, label=""
    )
    target = set_reward_target(trajectory_id=trajectory_id, step_id=step_id)
    for _ in range(SET_REWARD_ATTEMPTS):
        current = set_reward_current(tenant_id=tenant_id, trajectory_id=trajectory_id, step_id=step_id)
        if current is not None and current.value == value:
            return {**_payload(current, created=False), "replaces": None}
        number = set_reward_number(current.idempotency_key) + 1 if current else 1
        with transaction.atomic():
            reward, created = _store(
                tenant_id=tenant_id,
                idempotency_scope=SET_REWARD_SCOPE,
                idempotency_key=f"{target}#{number}",
                trajectory_id=trajectory_id,
                step_id=step_id or None,
                target=RewardTarget.STEP if step_id else RewardTarget.TRAJECTORY,
                value=value,
                kind=kind,
                label=label,
                source=RewardSource.AGENT,
                timing=timing,
                created_by=created_by,
                spec=spec,
                reason=f"replaces reward {current.pk} (value {current.value})" if current else "",
            )
            if created and current is not None:
                audit_record(
                    tenant=Tenant.objects.get(pk=tenant_id),
                    actor=Actor(kind="api_key", id="", label=created_by),
                    verb="reward.replace",
                    target=reward,
                    data={
                        "trajectory_id": str(trajectory_id),
                        "step_id": str(step_id) if step_id else None,
                        "value": value,
                        "replaces": str(current.pk),
                        "replaced_value": current.value,
                    },
                )
        if created:
            return {**_payload(reward, created=True), "replaces": str(current.pk) if current else None}
        if reward.value == value:  # a concurrent retry of this very call stored it first
            return {**_payload(reward, created=False), "replaces": None}
    raise Conflict(
        "the reward of this interaction is being changed by concurrent calls; retry",
        code="reward_conflict",
    )


@transaction.atomic
def reward_create(
    *,
    tenant: Tenant,
    actor: Actor,
    trajectory_id,
    step_id=None,
    value: float | None = None,
    label: str = "",
    kind: str | None = None,
    spec_name: str = "",
    source: str | None = None,
    timing: str = RewardTiming.DELAYED,
    idempotency_key: str | None = None,
    override: bool = False,
    reason: str = "",
    created_by: str,
) -> tuple[Reward, bool]:
    """A reward from the REST API or the console (annotators and operators in person, programs through keys).
    The source follows the actor (`_source_for`): a key names user/agent/environment/rule (default agent), a
    person posts as annotator; another source is refused (403 `source_not_allowed`).
    Tenancy: the trajectory (and step) must be the tenant's, else 404. An override (`override=True`)
    needs a reason, beats every other source in the training reward and is audited as `reward.override`;
    others as `reward.create`. Idempotent on `idempotency_key` within the scope of (source, actor): a
    repeat by the same principal returns (reward, False); another principal's key never matches.
    Enqueues the trajectory's qualification on commit."""
    source, scope = _source_for(actor=actor, requested=source)
    existing = _existing(tenant.pk, scope, idempotency_key)
    if existing:
        return existing, False
    trajectory = trajectory_agent(tenant_id=tenant.pk, trajectory_id=trajectory_id)
    if trajectory is None:
        raise NotFound("no such trajectory in this tenant", code="trajectory_not_found")
    if step_id and not step_exists(tenant=tenant, trajectory_id=trajectory["id"], step_id=step_id):
        raise NotFound("no such step in this trajectory", code="step_not_found")
    if override and not reason.strip():
        raise ValidationFailed("an override needs a reason", fields={"reason": ["required for an override"]})
    spec, kind, value, label = _checked(
        tenant_id=tenant.pk,
        agent_name=trajectory["agent_name"],
        spec_name=spec_name,
        kind=kind,
        value=value,
        label=label,
    )
    reward, created = _store(
        tenant_id=tenant.pk,
        idempotency_scope=scope,
        idempotency_key=idempotency_key,
        trajectory_id=trajectory["id"],
        step_id=step_id or None,
        target=RewardTarget.STEP if step_id else RewardTarget.TRAJECTORY,
        value=value,
        kind=kind,
        label=label,
        source=source,
        timing=timing,
        created_by=created_by,
        spec=spec,
        is_override=override,
        reason=reason,
    )
    if created:
        audit_record(
            tenant=tenant,
            actor=actor,
            verb="reward.override" if override else "reward.create",
            target=reward,
            data={
                "trajectory_id": str(reward.trajectory_id),
                "value": value,
                "kind": kind,
                "source": source,
                "spec": spec.name if spec else None,
                "reason": reason,
            },
        )
    return reward, created


def _recorded_at(value) -> datetime:
    """An imported reward's own time (ATDP: ISO 8601); now when the record has none."""
    if isinstance(value, datetime):
        return value
    if not value:
        return timezone.now()
    moment = parse_datetime(value)
    if moment is None:  # imported records are validated (ATDP date-time): never
        raise ValueError(f"not a date-time: {value!r}")
    return moment


@transaction.atomic
def rewards_import(*, tenant: Tenant, trajectory: "Trajectory", rewards: list[dict]) -> list[Reward]:
    """Stores the rewards of an imported ATDP trajectory (SDK mode) beside `trajectory`, a row of `tenant`,
    as they were recorded: reward ids, sources, timing, `created_by` (default "import") and idempotency keys
    are kept, and `idempotency_scope` stays "" so no principal's namespace holds them. Imported rewards are
    history, not new judgements: they are not checked against specs, enqueue nothing and are audited with
    their trajectory (`trajectory.import`), not one by one. A reward id or an idempotency key already stored
    raises IntegrityError; the caller's transaction then stores nothing of the record."""
    return Reward.objects.bulk_create(
        [
            Reward(
                id=uuid.UUID(reward["reward_id"]),
                tenant=tenant,
                trajectory=trajectory,
                step_id=reward.get("step_id"),
                target=reward["target"],
                value=reward["value"],
                kind=reward["kind"],
                label=reward.get("label") or "",
                source=reward["source"],
                timing=reward["timing"],
                created_by=reward.get("created_by") or "import",
                created_at=_recorded_at(reward.get("created_at")),
                idempotency_key=reward.get("idempotency_key"),
            )
            for reward in rewards
        ]
    )
