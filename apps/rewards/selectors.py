"""Reads of reward specs and rewards, tenant first."""

import json

from django.db.models import Count, Q

from apps.core.selectors import get_in_tenant
from apps.rewards.errors import RewardRejected
from apps.rewards.models import Evaluator, Reward, RewardKind, RewardSource, RewardSpec
from apps.tenants.models import Tenant
from apps.trajectories.models import Step
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


def training_reward(*, tenant: Tenant, trajectory) -> float | None:
    """The trajectory's training reward by its agent's training spec and that spec's combination rule.
    Without a training spec: every non-critique reward, annotator over user over evaluator over the rest."""
    spec = reward_spec_for(tenant_id=tenant.pk, agent_name=trajectory.agent_name)
    rewards = Reward.objects.for_tenant(tenant).filter(trajectory_id=trajectory.pk)
    rewards = rewards.filter(spec=spec) if spec else rewards.exclude(kind=RewardKind.CRITIQUE)
    points = [
        RewardPoint(value=value, source=source, created_at=created_at, is_override=is_override)
        for value, source, created_at, is_override in rewards.values_list(
            "value", "source", "created_at", "is_override"
        )
    ]
    return combine(points, combination_rule(spec))


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


def _tool_succeeded(content) -> bool:
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return not content.lower().startswith("error")
    return not (isinstance(content, dict) and content.get("error"))


def trajectory_outcome(*, trajectory) -> Outcome:
    """What evaluators judge: the final answer, each tool call with whether its result succeeded (a tool
    message or result without an error), and the environment's reported outcome (env_event results)."""
    steps = list(
        Step.objects.filter(tenant_id=trajectory.tenant_id, trajectory=trajectory)
        .order_by("index")
        .values("kind", "observation", "action", "result")
    )
    calls: dict[str, str] = {}
    results: dict[str, bool] = {}
    final_text = ""
    environment: dict = {}
    for step in steps:
        action, result = step["action"] or {}, step["result"] or {}
        for message in (step["observation"] or {}).get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "tool" and message.get("tool_call_id"):
                results[message["tool_call_id"]] = _tool_succeeded(message.get("content"))
        for item in result.get("tool_results") or []:
            if isinstance(item, dict) and item.get("tool_call_id"):
                results[item["tool_call_id"]] = not item.get("error")
        for call in action.get("tool_calls") or []:
            if isinstance(call, dict):
                calls[call.get("id") or ""] = (call.get("function") or {}).get("name") or ""
        if step["kind"] == "env_event":
            environment.update(result)
        elif step["kind"] == "llm_call":
            message = action.get("message") or {}
            final_text = (
                action.get("text") or (message.get("content") if isinstance(message, dict) else "") or ""
            )
    return Outcome(
        task_id=trajectory.task_id,
        final_text=final_text,
        environment=environment,
        tool_calls=tuple(ToolCall(call_id, name, results.get(call_id)) for call_id, name in calls.items()),
    )
