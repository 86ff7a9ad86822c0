"""Evaluators: registering and editing versions, queueing runs, and storing a run's result as a reward
(idempotent per evaluator version and trajectory)."""

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.core.tasking import task_enqueue_on_commit
from apps.rewards.choices import EvaluatorRunStatus
from apps.rewards.models import (
    Evaluator,
    EvaluatorRun,
    Reward,
    RewardKind,
    RewardSource,
    RewardTarget,
    RewardTiming,
)
from apps.rewards.selectors import evaluator_has_rewards, judge_target, reward_spec_for, trajectory_outcome
from apps.rewards.services.storing import EVALUATOR_PRINCIPAL, _checked, _existing, _store, idempotency_scope
from apps.tenants.models import Tenant
from workers.pii.base import InvalidPattern
from workers.pii.patterns import tenant_regex
from workers.rewards.evaluators import KINDS as EVALUATOR_KINDS
from workers.rewards.evaluators import LLM_JUDGE, run_evaluator
from workers.rewards.judge import JudgeConfigInvalid, judge_config, judge_config_problems

if TYPE_CHECKING:
    from apps.trajectories.models import Trajectory

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
    if kind == "regex":
        return _regex_problems(config)
    if kind != LLM_JUDGE:
        return {}
    problems = judge_config_problems(config)
    if problems:
        return problems
    checked = judge_config(config)
    _, problems = judge_target(tenant=tenant, model=checked.model, version=checked.version)
    return problems


def _regex_problems(config) -> dict[str, str]:
    """A regex evaluator's pattern, checked as its runs will compile it (workers.pii.patterns), so a bad one
    is refused when saved rather than failing every run."""
    if not isinstance(config, dict) or "pattern" not in config:
        return {"config": "a regex evaluator needs 'pattern'"}
    try:
        tenant_regex(config["pattern"], name="pattern", ignore_case=bool(config.get("ignore_case")))
    except InvalidPattern as error:
        return {"config": f"pattern: {error.reason}"}
    return {}


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
    task_enqueue_on_commit("rewards.run_evaluators", str(trajectory_id))
    return True


def evaluator_run_enqueue(*, tenant: Tenant, evaluator: Evaluator, trajectory: "Trajectory") -> None:
    """Queues one evaluator over one trajectory of `tenant` (task rewards.run_evaluators, eval queue) on
    commit; another tenant's evaluator or trajectory answers as a missing one. A repeat is harmless: the task
    stores one reward per evaluator version and trajectory."""
    if evaluator.tenant_id != tenant.pk or trajectory.tenant_id != tenant.pk:
        raise NotFound("no such evaluator or trajectory in this tenant")
    task_enqueue_on_commit("rewards.run_evaluators", str(trajectory.pk), evaluator.pk)


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
    apps.loop.judging instead."""
    existing = evaluator_reward_existing(evaluator=evaluator, trajectory_id=trajectory.pk)
    if existing:
        return existing
    result = run_evaluator(
        evaluator.kind,
        evaluator.config,
        trajectory_outcome(trajectory=trajectory),
        programs_dir=settings.AREAL_EVALUATOR_PROGRAMS_DIR or None,
    )
    return evaluator_reward_store(
        evaluator=evaluator, trajectory=trajectory, value=result.value, label=result.label
    )


# ---- an LLM judge's runs (apps.loop.judging runs the judge) -------------------------------------------


def evaluator_run_claim(
    *, evaluator: Evaluator, trajectory, stale_after: timedelta
) -> tuple[EvaluatorRun, bool]:
    """(the pair's run, whether this worker now holds it). Tenancy: the evaluator's tenant (the caller has
    checked the trajectory is of it). A new run is created running; a failed one, or one running for longer
    than `stale_after` (a killed worker's), is taken over by a conditional update; a succeeded or freshly
    running one is left alone, so two workers never judge the same pair at once."""
    now = timezone.now()
    run, created = EvaluatorRun.objects.get_or_create(
        tenant_id=evaluator.tenant_id,
        evaluator=evaluator,
        trajectory=trajectory,
        defaults={"status": EvaluatorRunStatus.RUNNING, "started_at": now},
    )
    if created:
        return run, True
    taken = (
        EvaluatorRun.objects.filter(pk=run.pk)
        .filter(
            Q(status=EvaluatorRunStatus.FAILED)
            | Q(status=EvaluatorRunStatus.RUNNING, started_at__lt=now - stale_after)
        )
        .update(status=EvaluatorRunStatus.RUNNING, started_at=now, finished_at=None)
    )
    run.refresh_from_db()
    return run, bool(taken)


def evaluator_run_session_set(*, run: EvaluatorRun, session_id: str) -> None:
    """Records the gateway session the run's judge is called in."""
    EvaluatorRun.objects.filter(pk=run.pk).update(judge_session_id=session_id)


def evaluator_run_attempts_add(*, run: EvaluatorRun, attempts: int) -> None:
    """Counts `attempts` more judge calls on the run (an F() increment)."""
    EvaluatorRun.objects.filter(pk=run.pk).update(attempts=F("attempts") + attempts)


def evaluator_run_finish(*, run: EvaluatorRun, **fields) -> EvaluatorRun:
    """Ends the run with `fields` (status, reward, error_code, ...) and `finished_at` now (unless given);
    returns it read again."""
    fields = {"finished_at": timezone.now(), **fields}
    EvaluatorRun.objects.filter(pk=run.pk).update(**fields)
    run.refresh_from_db()
    return run
