"""Reads of reward specs and rewards, tenant first."""

import json
import uuid
from dataclasses import dataclass, field

from django.db.models import Avg, Count, Prefetch, Q
from django.db.models.functions import TruncMinute

from apps.core.selectors import get_in_tenant
from apps.rewards.choices import EvaluatorKind
from apps.rewards.errors import RewardRejected
from apps.rewards.models import (
    Evaluator,
    EvaluatorRun,
    Reward,
    RewardKind,
    RewardSource,
    RewardSpec,
)
from apps.tenants.models import Tenant
from apps.trajectories.choices import TrajectoryStatus
from apps.trajectories.selectors import step_list
from workers.rewards.combine import DEFAULT_PRIORITY, CombinationRule, RewardPoint, combine
from workers.rewards.evaluators import Outcome, ToolCall
from workers.rewards.specs import SpecData


def reward_spec_list(*, tenant: Tenant, agent_name: str | None = None):
    specs = RewardSpec.objects.for_tenant(tenant)
    if agent_name is not None:
        specs = specs.filter(agent_name__in=[agent_name, ""])
    return specs.order_by("agent_name", "name")


def reward_spec_get(*, tenant: Tenant, spec_id) -> RewardSpec:
    return get_in_tenant(RewardSpec, tenant=tenant, pk=spec_id, code="reward_spec_not_found")


def reward_spec_for(*, tenant_id: int, agent_name: str, name: str = "") -> RewardSpec | None:
    """The spec a reward is checked against: the one named (the agent's own before the tenant-wide one;
    an unknown name is rejected), else the agent's training reward spec, else None."""
    specs = RewardSpec.objects.filter(tenant_id=tenant_id, agent_name__in=[agent_name, ""])
    specs = specs.filter(name=name) if name else specs.filter(is_training_reward=True)
    # The agent's own spec sorts before the tenant-wide one (blank agent name).
    found = sorted(specs, key=lambda spec: spec.agent_name == "")
    if name and not found:
        raise RewardRejected(
            f"unknown reward spec {name!r} for agent {agent_name or '(none)'}",
            code="reward_spec_unknown",
            fields={"spec": ["unknown reward spec"]},
        )
    return found[0] if found else None


def spec_data(spec: RewardSpec) -> SpecData:
    return SpecData(
        name=spec.name,
        kind=spec.kind,
        minimum=spec.minimum,
        maximum=spec.maximum,
        categories=dict(spec.categories or {}),
    )


def combination_rule(spec: RewardSpec | None) -> CombinationRule:
    if spec is None:
        return CombinationRule()
    return CombinationRule(
        mode=spec.combination,
        priority=tuple(spec.source_priority or DEFAULT_PRIORITY),
        weights={source: float(weight) for source, weight in (spec.source_weights or {}).items()},
    )


def reward_list(
    *,
    tenant: Tenant,
    trajectory_id=None,
    step_id=None,
    source=None,
    kind=None,
    spec_id=None,
    created_after=None,
    created_before=None,
    is_override=None,
):
    """Newest first."""
    rewards = Reward.objects.for_tenant(tenant).select_related("spec")
    exact = {
        "trajectory_id": trajectory_id,
        "step_id": step_id,
        "source": source,
        "kind": kind,
        "spec_id": spec_id,
    }
    rewards = rewards.filter(**{name: value for name, value in exact.items() if value})
    if created_after:
        rewards = rewards.filter(created_at__gte=created_after)
    if created_before:
        rewards = rewards.filter(created_at__lt=created_before)
    if is_override is not None:
        rewards = rewards.filter(is_override=is_override)
    return rewards.order_by("-created_at", "-id")


def reward_get(*, tenant: Tenant, reward_id) -> Reward:
    return get_in_tenant(
        Reward.objects.select_related("spec"), tenant=tenant, pk=reward_id, code="reward_not_found"
    )


@dataclass(frozen=True)
class SessionRewardTarget:
    """Where a reward addressed by session id goes (`reward_session_target`)."""

    trajectory_id: uuid.UUID  # the session's newest trajectory: its last continuation, else its first
    is_open: bool  # that trajectory is open
    agent_name: str
    trajectory_ids: tuple[uuid.UUID, ...]  # every trajectory of the session, oldest first


def reward_session_target(*, tenant_id: int, session_id: str) -> SessionRewardTarget | None:
    """The one rule for a reward that names a session, not a step: it goes to the session's newest
    trajectory. Once the session's trajectory ended (idle timeout, end API, end signal) and a late step went
    on in a continuation `<session>~2` (apps/trajectories/lifecycle.py), that is the live continuation, not
    the ended trajectory the session id names. A reward that names a step (interaction) is pinned to the
    step's own trajectory instead; `trajectory_ids` tells whether a step is one of the session's.
    Tenancy: `tenant_id`'s rows only; None when the tenant has no such session (whoever else has one)."""
    from apps.trajectories.selectors import session_trajectories  # it reads rewards' selectors in turn

    chain = session_trajectories(tenant_id=tenant_id, session_id=session_id)
    if not chain:
        return None
    newest = chain[-1]
    return SessionRewardTarget(
        trajectory_id=newest["id"],
        is_open=newest["status"] == TrajectoryStatus.OPEN,
        agent_name=newest["agent_name"],
        trajectory_ids=tuple(row["id"] for row in chain),
    )


# The namespace of the rewards the session endpoints (/rl/set_reward, /rl/end_session's final_reward) write:
# one key per target and sequence, `<step id or trajectory:<id>>#<n>`; the highest n is the current one.
SET_REWARD_SCOPE = "agent/set_reward"


def set_reward_target(*, trajectory_id, step_id) -> str:
    return str(step_id) if step_id else f"trajectory:{trajectory_id}"


def set_reward_number(idempotency_key: str | None) -> int:
    """The place of a session-endpoint reward in its interaction's sequence (`<target>#<n>`); 0 without a key."""
    return int(idempotency_key.rsplit("#", 1)[1]) if idempotency_key else 0


def set_reward_current(*, tenant_id: int, trajectory_id, step_id) -> Reward | None:
    """The agent's current reward for one interaction (or, without a step, for the session) from the session
    endpoints: the newest in their sequence; the ones it replaced stay stored, superseded."""
    rows = Reward.objects.select_related("spec").filter(
        tenant_id=tenant_id,
        trajectory_id=trajectory_id,
        step_id=step_id or None,
        idempotency_scope=SET_REWARD_SCOPE,
    )
    return max(rows, key=lambda row: set_reward_number(row.idempotency_key), default=None)


def _superseded(rows: list[dict]) -> set:
    """Ids of session-endpoint rewards a later one for the same target replaced."""
    newest: dict = {}
    for row in rows:
        if row["idempotency_scope"] != SET_REWARD_SCOPE:
            continue
        number = set_reward_number(row["idempotency_key"])
        if row["step_id"] not in newest or number > newest[row["step_id"]][0]:
            newest[row["step_id"]] = (number, row["id"])
    return {
        row["id"]
        for row in rows
        if row["idempotency_scope"] == SET_REWARD_SCOPE and row["id"] != newest[row["step_id"]][1]
    }


@dataclass(frozen=True)
class TrainingRewards:
    """A trajectory's rewards as training uses them (workers.rl.step_rewards).
    `trajectory`: the one number for the whole trajectory (`training_reward`); `outcome`: the rewards that
    name the trajectory rather than a step, combined; `steps`: each step's own rewards, combined (steps
    without a trusted one are absent; empty when an operator overrode the whole trajectory)."""

    trajectory: float | None
    outcome: float | None = None
    steps: dict[str, float] = field(default_factory=dict)


def training_rewards(*, tenant: Tenant, trajectory) -> TrainingRewards:
    """The trajectory's rewards by its agent's training spec and that spec's combination rule (without a
    training spec: every non-critique reward, annotator over user over evaluator over the rest), combined
    over the whole trajectory, over its trajectory-level rewards, and per step. Rewards a later session-
    endpoint reward replaced are left out. An override of the whole trajectory beats every step's own."""
    spec = reward_spec_for(tenant_id=tenant.pk, agent_name=trajectory.agent_name)
    rewards = Reward.objects.for_tenant(tenant).filter(trajectory_id=trajectory.pk)
    rewards = rewards.filter(spec=spec) if spec else rewards.exclude(kind=RewardKind.CRITIQUE)
    rows = list(
        rewards.values(
            "id",
            "value",
            "source",
            "created_at",
            "is_override",
            "step_id",
            "idempotency_scope",
            "idempotency_key",
        )
    )
    superseded = _superseded(rows)
    by_target: dict = {}
    for row in rows:
        if row["id"] not in superseded:
            by_target.setdefault(row["step_id"], []).append(
                RewardPoint(
                    value=row["value"],
                    source=row["source"],
                    created_at=row["created_at"],
                    is_override=row["is_override"],
                )
            )
    rule = combination_rule(spec)
    trajectory_level = by_target.pop(None, [])
    steps = {
        str(step_id): value
        for step_id, points in by_target.items()
        if (value := combine(points, rule)) is not None
    }
    if any(point.is_override for point in trajectory_level):
        steps = {}
    return TrainingRewards(
        trajectory=combine(trajectory_level + [p for points in by_target.values() for p in points], rule),
        outcome=combine(trajectory_level, rule),
        steps=steps,
    )


def training_reward(*, tenant: Tenant, trajectory) -> float | None:
    """The trajectory's training reward: one number for the whole trajectory (`training_rewards`)."""
    return training_rewards(tenant=tenant, trajectory=trajectory).trajectory


def feedback_summary(*, tenant: Tenant, trajectory_id=None) -> dict:
    """End-user signals: thumbs up and down (boolean rewards from users) and corrections (critiques)."""
    rewards = Reward.objects.for_tenant(tenant).filter(source=RewardSource.USER)
    if trajectory_id:
        rewards = rewards.filter(trajectory_id=trajectory_id)
    return rewards.aggregate(
        thumbs_up=Count("id", filter=Q(kind=RewardKind.BOOLEAN, value=1)),
        thumbs_down=Count("id", filter=Q(kind=RewardKind.BOOLEAN, value=0)),
        corrections=Count("id", filter=Q(kind=RewardKind.CRITIQUE)),
    )


def evaluator_list(*, tenant: Tenant, agent_name: str | None = None, enabled: bool | None = None):
    evaluators = Evaluator.objects.for_tenant(tenant).select_related("spec")
    if agent_name is not None:
        evaluators = evaluators.filter(agent_name__in=[agent_name, ""])
    if enabled is not None:
        evaluators = evaluators.filter(enabled=enabled)
    return evaluators.order_by("name", "version")


def evaluator_get(*, tenant: Tenant, evaluator_id) -> Evaluator:
    return get_in_tenant(
        Evaluator.objects.select_related("spec"), tenant=tenant, pk=evaluator_id, code="evaluator_not_found"
    )


def dangerously_llm_judge_with_tenant(evaluator_id) -> Evaluator | None:
    """The llm_judge evaluator `evaluator_id` of whichever tenant, with its tenant and spec loaded (the judge
    task's entry: the tenant comes from the row), or None (missing, or another kind). Every read after it
    must be scoped to that tenant."""
    return (
        Evaluator.objects.select_related("tenant", "spec")
        .filter(pk=evaluator_id, kind=EvaluatorKind.LLM_JUDGE)
        .first()
    )


def evaluator_has_rewards(*, evaluator: Evaluator) -> bool:
    """Whether this evaluator version has stored a result (its rewards carry the evaluator workers' key
    `evaluator:<id>:<trajectory>`): a used version's meaning must not change."""
    return Reward.objects.filter(
        tenant_id=evaluator.tenant_id,
        idempotency_scope=f"{RewardSource.EVALUATOR}/worker",
        idempotency_key__startswith=f"evaluator:{evaluator.pk}:",
    ).exists()


def evaluator_run_list(*, tenant: Tenant, evaluator_id: int, trajectory_id=None, status: str | None = None):
    """The LLM-judge runs of one evaluator of the tenant, newest first."""
    runs = EvaluatorRun.objects.for_tenant(tenant).filter(evaluator_id=evaluator_id).select_related("reward")
    if trajectory_id:
        runs = runs.filter(trajectory_id=trajectory_id)
    if status:
        runs = runs.filter(status=status)
    return runs.order_by("-created_at", "-id")


@dataclass(frozen=True)
class JudgeTarget:
    """The model version an LLM judge is pinned to: a version of the tenant's registry (`model_version`, the
    gateway pins the session to it) or, for a model the registry does not know, the tenant's backends that
    serve it at that version (an external provider, for example)."""

    model: str
    version: str
    model_version: object | None = None  # apps.training ModelVersion when the registry holds the model


# The tenant's model registry belongs to apps.training, which sits above this app (it trains on rewards): it
# registers its lookup here in its AppConfig.ready(), `versions(*, tenant, name) -> queryset of model versions`.
_MODEL_VERSIONS: list = []


def model_versions_register(versions) -> None:
    """Registers the model registry's `versions(*, tenant, name)` that `judge_target` pins judges to."""
    _MODEL_VERSIONS[:] = [versions]


def judge_target(*, tenant: Tenant, model: str, version: str) -> tuple[JudgeTarget | None, dict[str, str]]:
    """(the judge's target, or None with the problem by field `config.model` / `config.version`)."""
    from apps.inference.selectors import backend_list

    (model_version_list,) = _MODEL_VERSIONS
    registered = model_version_list(tenant=tenant, name=model)
    if registered.exists():
        number = int(version) if version.isdigit() else None
        found = registered.filter(number=number).first() if number is not None else None
        if found is None:
            known = ", ".join(str(n) for n in sorted(registered.values_list("number", flat=True)))
            return None, {
                "config.version": f"no version {version!r} of {model!r} in the registry (it has {known})"
            }
        return JudgeTarget(model=model, version=str(found.number), model_version=found), {}
    backends = backend_list(tenant=tenant, served_model=model)
    if backends.filter(model_version=version).exists():
        return JudgeTarget(model=model, version=version), {}
    if backends.exists():
        served = ", ".join(sorted({v or "(none)" for v in backends.values_list("model_version", flat=True)}))
        return None, {
            "config.version": f"no backend serves {model!r} at version {version!r} (they serve {served})"
        }
    return None, {
        "config.model": f"this tenant's gateway routes no model {model!r}: register a backend or a model version"
    }


def _tool_succeeded(content) -> bool:
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return not content.lower().startswith("error")
    return not (isinstance(content, dict) and content.get("error"))


def _as_text(content) -> str:
    """A message's content as text: a string as is, a list of parts joined by their text, else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            (part.get("text") or "") if isinstance(part, dict) else str(part) for part in content
        ).strip()
    return json.dumps(content, ensure_ascii=False)


def trajectory_outcome(*, trajectory) -> Outcome:
    """What evaluators judge: the task (the first user message), the final answer, each tool call with its
    arguments, its result and whether that succeeded (a tool message or result without an error), and the
    environment's reported outcome (env_event results)."""
    steps = list(
        step_list(tenant=trajectory.tenant_id, trajectory=trajectory).values(
            "kind", "observation", "action", "result"
        )
    )
    calls: dict[str, tuple[str, str]] = {}
    results: dict[str, tuple[bool, str]] = {}
    task = final_text = ""
    environment: dict = {}
    for step in steps:
        action, result = step["action"] or {}, step["result"] or {}
        for message in (step["observation"] or {}).get("messages") or []:
            if not isinstance(message, dict):
                continue
            if message.get("role") == "user" and not task:
                task = _as_text(message.get("content"))
            if message.get("role") == "tool" and message.get("tool_call_id"):
                content = message.get("content")
                results[message["tool_call_id"]] = (_tool_succeeded(content), _as_text(content))
        for item in result.get("tool_results") or []:
            if isinstance(item, dict) and item.get("tool_call_id"):
                text = _as_text(item.get("error") or item.get("content") or item.get("result"))
                results[item["tool_call_id"]] = (not item.get("error"), text)
        for call in action.get("tool_calls") or []:
            if isinstance(call, dict):
                function = call.get("function") or {}
                calls[call.get("id") or ""] = (
                    function.get("name") or "",
                    _as_text(function.get("arguments")),
                )
        if step["kind"] == "env_event":
            environment.update(result)
        elif step["kind"] == "llm_call":
            message = action.get("message") or {}
            final_text = (
                action.get("text") or (message.get("content") if isinstance(message, dict) else "") or ""
            )
    return Outcome(
        task_id=trajectory.task_id,
        task=task,
        final_text=final_text,
        environment=environment,
        tool_calls=tuple(
            ToolCall(
                call_id,
                name,
                results[call_id][0] if call_id in results else None,
                arguments=arguments,
                result=results[call_id][1] if call_id in results else "",
            )
            for call_id, (name, arguments) in calls.items()
        ),
    )


def reward_record_part(tenant: Tenant) -> Prefetch:
    """The rewards of an ATDP record (trajectories.selectors.trajectory_with_records): the tenant's, in creation
    order, ties by id, so two exports agree."""
    return Prefetch("rewards", queryset=Reward.objects.for_tenant(tenant).order_by("created_at", "id"))


def reward_import_conflicts(*, tenant: Tenant, rewards: list[dict]) -> dict[str, str]:
    """Field paths of a valid ATDP record's `rewards` that clash with stored data, each with its problem: a
    reward id already stored (a global key, so another tenant's count too, without saying whose), or an
    idempotency key this tenant has already used or the record repeats. Empty: no clash."""
    conflicts = {}
    reward_ids = {uuid.UUID(reward["reward_id"]): position for position, reward in enumerate(rewards)}
    for reward_id in Reward.objects.filter(id__in=reward_ids).values_list("id", flat=True):
        conflicts[f"rewards[{reward_ids[reward_id]}].reward_id"] = "a reward with this id is already stored"
    keys: dict[str, int] = {}
    for position, reward in enumerate(rewards):
        key = reward.get("idempotency_key")
        if key is None:
            continue
        if key in keys:
            conflicts[f"rewards[{position}].idempotency_key"] = (
                f"repeats rewards[{keys[key]}].idempotency_key"
            )
        else:
            keys[key] = position
    used = Reward.objects.filter(tenant=tenant, idempotency_key__in=keys).values_list(
        "idempotency_key", flat=True
    )
    for key in used:
        if key not in keys:  # never: the query names only these keys (the column itself may be null)
            continue
        conflicts[f"rewards[{keys[key]}].idempotency_key"] = (
            "this tenant already stored a reward with this key"
        )
    return conflicts


def reward_outcomes_per_minute(*, tenant: Tenant, since) -> list[dict]:
    """Rewards (critiques excluded) created since `since`, per minute (oldest first): their count, mean value
    and success rate, where a reward of at least 0.5 counts as a success (the environment's 0/1 check,
    thumbs up)."""
    rows = (
        Reward.objects.for_tenant(tenant)
        .filter(created_at__gte=since)
        .exclude(kind="critique")
        .annotate(minute=TruncMinute("created_at"))
        .values("minute")
        .annotate(
            rewards=Count("id"), reward_mean=Avg("value"), successes=Count("id", filter=Q(value__gte=0.5))
        )
        .order_by("minute")
    )
    return [
        {
            "minute": row["minute"],
            "rewards": row["rewards"],
            "reward_mean": row["reward_mean"],
            "success_rate": row["successes"] / row["rewards"],
        }
        for row in rows
    ]
