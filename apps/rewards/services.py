"""Appending rewards and defining reward specs. Rewards are never edited; the same idempotency key twice
from the same source and principal stores one reward (keys are namespaced, `idempotency_scope`); an operator's override is a new reward marked as such, audited."""

import uuid
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, Gone, NotFound, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.rewards.errors import RewardRejected
from apps.rewards.models import (
    Combination,
    Evaluator,
    Reward,
    RewardKind,
    RewardSource,
    RewardSpec,
    RewardTarget,
    RewardTiming,
)
from apps.rewards.selectors import (
    SET_REWARD_SCOPE,
    evaluator_has_rewards,
    judge_target,
    reward_spec_for,
    set_reward_current,
    set_reward_number,
    set_reward_target,
    spec_data,
    trajectory_outcome,
)
from apps.tenants.models import Tenant
from apps.trajectories.models import Step, Trajectory, trajectory_id_for
from workers.rewards.evaluators import KINDS as EVALUATOR_KINDS
from workers.rewards.evaluators import LLM_JUDGE, run_evaluator
from workers.rewards.judge import JudgeConfigInvalid, judge_config, judge_config_problems
from workers.rewards.specs import SpecData, check_reward, spec_problems


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
    """A new reward can change the trajectory's qualification: its gates re-run once this commits."""
    from apps.qualification.services import qualification_enqueue

    qualification_enqueue(trajectory_id=reward.trajectory_id)


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

    ended_at = (
        Trajectory.objects.filter(tenant_id=tenant_id, pk=trajectory_id)
        .values_list("ended_at", flat=True)
        .first()
    )
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
    """The gateway's reward path (/rl/set_reward, /v1/rewards). Binds the reward to a step (step_id /
    interaction_id) or to a session's trajectory, inside the tenant only: another tenant's target is not
    found (404). Checks it against the named spec or the agent's training spec (422 naming the spec).
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
        step = (
            Step.objects.filter(tenant_id=tenant_id, id=_as_uuid(step_id, "step"))
            .values("id", "trajectory_id", "trajectory__agent_name")
            .first()
        )
        if step is None:
            raise NotFound(f"no step {step_id!r} in this tenant", code="step_not_found")
        target, trajectory_id, bound_step = RewardTarget.STEP, step["trajectory_id"], step["id"]
        agent_name = step["trajectory__agent_name"]
    elif not session_id:  # the gateway asks for exactly one of the two
        raise NotFound(f"no session {session_id!r} in this tenant", code="session_not_found")
    else:
        trajectory_id = trajectory_id_for(tenant_id=tenant_id, session_id=session_id)
        agent_name = (
            Trajectory.objects.filter(tenant_id=tenant_id, id=trajectory_id)
            .values_list("agent_name", flat=True)
            .first()
        )
        if agent_name is None:
            raise NotFound(f"no session {session_id!r} in this tenant", code="session_not_found")
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
    agent_name = (
        Trajectory.objects.filter(tenant_id=tenant_id, pk=trajectory_id)
        .values_list("agent_name", flat=True)
        .first()
    )
    if agent_name is None:
        raise NotFound("no such session in this tenant", code="session_not_found")
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
    trajectory = (
        Trajectory.objects.for_tenant(tenant).filter(pk=trajectory_id).values("id", "agent_name").first()
    )
    if trajectory is None:
        raise NotFound("no such trajectory in this tenant", code="trajectory_not_found")
    if (
        step_id
        and not Step.objects.for_tenant(tenant).filter(pk=step_id, trajectory_id=trajectory["id"]).exists()
    ):
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
def rewards_import(*, tenant: Tenant, trajectory: Trajectory, rewards: list[dict]) -> list[Reward]:
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


SPEC_FIELDS = (
    "agent_name",
    "name",
    "kind",
    "minimum",
    "maximum",
    "categories",
    "is_training_reward",
    "combination",
    "source_priority",
    "source_weights",
    "description",
)


def _spec_validate(fields: dict) -> None:
    problems = spec_problems(
        SpecData(
            name=fields["name"],
            kind=fields["kind"],
            minimum=fields.get("minimum"),
            maximum=fields.get("maximum"),
            categories=fields.get("categories") or {},
        )
    )
    sources = set(RewardSource.values)
    if fields.get("is_training_reward") and fields["kind"] == RewardKind.CRITIQUE:
        problems["is_training_reward"] = "a critique (free text) cannot be the training reward"
    unknown = [source for source in fields.get("source_priority") or [] if source not in sources]
    unknown += [source for source in fields.get("source_weights") or {} if source not in sources]
    if unknown:
        problems["source_priority"] = f"unknown sources: {', '.join(sorted(set(unknown)))}"
    if fields.get("combination") == Combination.WEIGHTED_SUM and not fields.get("source_weights"):
        problems["source_weights"] = "a weighted sum needs {source: weight}"
    if problems:
        raise ValidationFailed(
            "the reward spec is invalid: " + "; ".join(f"{k}: {v}" for k, v in problems.items()),
            fields={name: [problem] for name, problem in problems.items()},
        )


@transaction.atomic
def reward_spec_create(*, tenant: Tenant, actor: Actor, **fields) -> RewardSpec:
    """Defines a reward spec (audited `reward_spec.create`). One name per agent, one training reward per
    agent (blank agent: tenant-wide): a second is a 409."""
    fields = {name: value for name, value in fields.items() if name in SPEC_FIELDS and value is not None}
    fields.setdefault("agent_name", "")
    _spec_validate(fields)
    clashes = RewardSpec.objects.for_tenant(tenant).filter(agent_name=fields["agent_name"])
    if clashes.filter(name=fields["name"]).exists():
        raise Conflict(
            f"a reward spec {fields['name']!r} already exists for this agent", code="reward_spec_exists"
        )
    if fields.get("is_training_reward") and clashes.filter(is_training_reward=True).exists():
        raise Conflict("this agent already has a training reward spec", code="training_reward_exists")
    spec = RewardSpec.objects.create(tenant=tenant, **fields)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="reward_spec.create",
        target=spec,
        data={name: getattr(spec, name) for name in SPEC_FIELDS},
    )
    return spec


EVALUATOR_FIELDS = ("name", "version", "kind", "config", "agent_name", "enabled")
# What an edit may change: a version's name and number are its identity; a new meaning is a new version.
EVALUATOR_EDITABLE = ("kind", "config", "agent_name", "enabled", "spec_name")
# Changes that alter what a version's rewards mean: refused once it has stored one.
EVALUATOR_MEANING = ("kind", "config", "spec_name")


def _evaluator_problems(*, tenant: Tenant, kind, config) -> dict[str, str]:
    """Field problems of an evaluator's kind and configuration. An llm_judge's configuration is checked by
    workers.rewards.judge and its model must be one the tenant's gateway routes at the pinned version."""
    if kind not in EVALUATOR_KINDS:
        return {"kind": f"one of {', '.join(EVALUATOR_KINDS)}"}
    if kind != LLM_JUDGE:
        return {}
    problems = judge_config_problems(config)
    if problems:
        return problems
    checked = judge_config(config)
    _, problems = judge_target(tenant=tenant, model=checked.model, version=checked.version)
    return problems


def _refuse_invalid_evaluator(problems: dict[str, str]) -> None:
    if problems:
        raise ValidationFailed(
            "the evaluator is invalid: "
            + "; ".join(f"{name}: {problem}" for name, problem in problems.items()),
            fields={name: [problem] for name, problem in problems.items()},
        )


@transaction.atomic
def evaluator_create(*, tenant: Tenant, actor: Actor, spec_name: str = "", **fields) -> Evaluator:
    """Registers an evaluator (audited `evaluator.create`). A new version is a new row: results of each
    version are kept apart (idempotency key per evaluator row). An llm_judge's configuration is validated
    (rubric placeholders, score range and/or verdicts, the pinned model version the gateway routes): each
    problem is a field error (`config.<field>`)."""
    fields = {name: value for name, value in fields.items() if name in EVALUATOR_FIELDS and value is not None}
    _refuse_invalid_evaluator(
        _evaluator_problems(tenant=tenant, kind=fields.get("kind"), config=fields.get("config", {}))
    )
    spec = None
    if spec_name:
        spec = reward_spec_for(tenant_id=tenant.pk, agent_name=fields.get("agent_name", ""), name=spec_name)
    if (
        Evaluator.objects.for_tenant(tenant)
        .filter(name=fields["name"], version=fields.get("version", "1"))
        .exists()
    ):
        raise Conflict("this evaluator version exists; register a new version", code="evaluator_exists")
    evaluator = Evaluator.objects.create(tenant=tenant, spec=spec, **fields)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evaluator.create",
        target=evaluator,
        data={name: getattr(evaluator, name) for name in EVALUATOR_FIELDS},
    )
    return evaluator


def _same_judge(kind: str, evaluator: Evaluator, config) -> bool:
    if kind != LLM_JUDGE or evaluator.kind != LLM_JUDGE:
        return False
    try:
        return judge_config(evaluator.config) == judge_config(config)
    except JudgeConfigInvalid:
        return False


@transaction.atomic
def evaluator_update(*, tenant: Tenant, actor: Actor, evaluator_id: int, changes: dict) -> Evaluator:
    """Edits one evaluator version of `tenant` (another tenant's: 404), row-locked, audited
    `evaluator.update` with the fields changed. `enabled` and `agent_name` can always change; `kind`,
    `config` and the reward spec only until the version has stored a reward (409 `evaluator_version_used`:
    register a new version, so each version's rewards keep one meaning). Validated as on create."""
    evaluator = get_in_tenant(
        Evaluator.objects.select_for_update(), tenant=tenant, pk=evaluator_id, code="evaluator_not_found"
    )
    unknown = sorted(set(changes) - set(EVALUATOR_EDITABLE))
    if unknown:
        raise ValidationFailed(
            "an evaluator version's name and version do not change: register a new version",
            fields={name: ["cannot be changed"] for name in unknown},
        )
    current = {
        "kind": evaluator.kind,
        "config": evaluator.config,
        "agent_name": evaluator.agent_name,
        "enabled": evaluator.enabled,
        "spec_name": evaluator.spec.name if evaluator.spec else "",
    }
    changed = {name: value for name, value in changes.items() if value is not None and current[name] != value}
    if "config" in changed and _same_judge(changes.get("kind", evaluator.kind), evaluator, changed["config"]):
        del changed["config"]  # the same judge written out another way (defaults spelled, 30 as 30.0)
    if not changed:
        return evaluator
    if set(changed) & set(EVALUATOR_MEANING) and evaluator_has_rewards(evaluator=evaluator):
        raise Conflict(
            f"{evaluator} has stored rewards, so its kind, configuration and spec are fixed: register a new "
            "version with the change",
            code="evaluator_version_used",
        )
    merged = {**current, **changed}
    _refuse_invalid_evaluator(
        _evaluator_problems(tenant=tenant, kind=merged["kind"], config=merged["config"])
    )
    if "spec_name" in changed or "agent_name" in changed:
        evaluator.spec = (
            reward_spec_for(tenant_id=tenant.pk, agent_name=merged["agent_name"], name=merged["spec_name"])
            if merged["spec_name"]
            else None
        )
    for name in ("kind", "config", "agent_name", "enabled"):
        setattr(evaluator, name, merged[name])
    evaluator.save()
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="evaluator.update",
        target=evaluator,
        data={"changed": changed, "before": {name: current[name] for name in changed}},
    )
    return evaluator


def evaluators_enqueue(*, trajectory_id, tenant_id: int) -> bool:
    """Queues the tenant's enabled evaluators over an ended trajectory, on commit. False: none to run."""
    if not Evaluator.objects.filter(tenant_id=tenant_id, enabled=True).exists():
        return False
    from apps.rewards.tasks import run_evaluators

    transaction.on_commit(lambda: run_evaluators.delay(str(trajectory_id)))
    return True


def evaluator_run_enqueue(*, tenant: Tenant, evaluator: Evaluator, trajectory: Trajectory) -> None:
    """Queues one evaluator over one trajectory of `tenant` (task rewards.run_evaluators, eval queue) on
    commit; another tenant's evaluator or trajectory answers as a missing one. A repeat is harmless: the task
    stores one reward per evaluator version and trajectory."""
    if evaluator.tenant_id != tenant.pk or trajectory.tenant_id != tenant.pk:
        raise NotFound("no such evaluator or trajectory in this tenant")
    from apps.rewards.tasks import run_evaluators

    trajectory_id, evaluator_id = str(trajectory.pk), evaluator.pk
    transaction.on_commit(lambda: run_evaluators.delay(trajectory_id, evaluator_id))


def evaluator_reward_key(*, evaluator: Evaluator, trajectory_id) -> str:
    return f"evaluator:{evaluator.pk}:{trajectory_id}"


def evaluator_reward_existing(*, evaluator: Evaluator, trajectory_id) -> Reward | None:
    """The reward this evaluator version already stored on the trajectory, if any."""
    scope = idempotency_scope(source=RewardSource.EVALUATOR, principal=EVALUATOR_PRINCIPAL)
    return _existing(
        evaluator.tenant_id, scope, evaluator_reward_key(evaluator=evaluator, trajectory_id=trajectory_id)
    )


def evaluator_reward_store(
    *,
    evaluator: Evaluator,
    trajectory,
    value: float,
    kind: str | None = None,
    label: str = "",
    evidence: dict | None = None,
) -> Reward:
    """Appends an evaluator's result as a trajectory reward of the evaluator's tenant (source evaluator,
    timing terminal, created_by "<name>@<version>", `evidence` kept beside it), checked against the
    evaluator's spec or the agent's training spec (RewardRejected). Idempotent: the key names the evaluator
    row and the trajectory, in the evaluator workers' own scope (no key or person can claim it), so a retry
    or a second run returns the first result. Enqueues the trajectory's qualification on commit."""
    key = evaluator_reward_key(evaluator=evaluator, trajectory_id=trajectory.pk)
    scope = idempotency_scope(source=RewardSource.EVALUATOR, principal=EVALUATOR_PRINCIPAL)
    existing = _existing(evaluator.tenant_id, scope, key)
    if existing:
        return existing
    spec, kind, value, checked_label = _checked(
        tenant_id=evaluator.tenant_id,
        agent_name=trajectory.agent_name,
        spec_name=evaluator.spec.name if evaluator.spec else "",
        kind=kind,
        value=value,
        label=label if kind == RewardKind.CATEGORICAL else "",
    )
    reward, _ = _store(
        tenant_id=evaluator.tenant_id,
        idempotency_scope=scope,
        idempotency_key=key,
        trajectory_id=trajectory.pk,
        step_id=None,
        target=RewardTarget.TRAJECTORY,
        value=value,
        kind=kind,
        label=checked_label or label,
        source=RewardSource.EVALUATOR,
        timing=RewardTiming.TERMINAL,
        created_by=f"{evaluator.name}@{evaluator.version}",
        spec=spec,
        evidence=evidence or {},
    )
    return reward


def evaluator_run(*, evaluator: Evaluator, trajectory) -> Reward:
    """Runs one rule evaluator over one trajectory and appends its result (`evaluator_reward_store`).
    Idempotent per evaluator version and trajectory. Raises EvaluatorError when the evaluator cannot judge
    (nothing stored); a value outside its spec raises RewardRejected. llm_judge evaluators run through
    apps.rewards.judging instead."""
    existing = evaluator_reward_existing(evaluator=evaluator, trajectory_id=trajectory.pk)
    if existing:
        return existing
    result = run_evaluator(evaluator.kind, evaluator.config, trajectory_outcome(trajectory=trajectory))
    return evaluator_reward_store(
        evaluator=evaluator, trajectory=trajectory, value=result.value, label=result.label
    )
