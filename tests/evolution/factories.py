"""Evolution rows written straight to their tables, without audit events: a policy in observe mode (valid as
`policies.validate_policy` sees it), a proposed decision of it, a signal point and a tool-failure cluster.
Decisions that must be audited and published are recorded through `decisions.decision_record`."""

from datetime import timedelta

import factory
from django.utils import timezone

from apps.evolution.models import (
    ClusterKind,
    Decision,
    DecisionKind,
    DecisionStatus,
    EvolutionPolicy,
    HarnessVersion,
    SignalPoint,
    ToolFailureCluster,
)
from tests.tenants.factories import TenantFactory


class EvolutionPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EvolutionPolicy

    tenant = factory.SubFactory(TenantFactory)
    model = factory.Sequence(lambda number: f"agent-model-{number}")
    signals = factory.LazyFunction(lambda: {"correction_rate": {"op": ">", "threshold": 0.2}})


class DecisionFactory(factory.django.DjangoModelFactory):
    """A train decision waiting for one operator, expiring in an hour."""

    class Meta:
        model = Decision

    policy = factory.SubFactory(EvolutionPolicyFactory)
    tenant = factory.SelfAttribute("policy.tenant")
    kind = DecisionKind.TRAIN
    status = DecisionStatus.PROPOSED
    reason = "correction_rate 0.31 > 0.2"
    evidence = factory.LazyFunction(
        lambda: {"signals": [{"name": "correction_rate", "value": 0.31, "op": ">", "threshold": 0.2}]}
    )
    approvals_required = 1
    decided_by = factory.LazyAttribute(lambda decision: f"evolution policy {decision.policy.pk}")
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1))


class SignalPointFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SignalPoint

    policy = factory.SubFactory(EvolutionPolicyFactory)
    tenant = factory.SelfAttribute("policy.tenant")
    name = "correction_rate"
    value = 0.1
    window_seconds = 600


class ToolFailureClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ToolFailureCluster

    policy = factory.SubFactory(EvolutionPolicyFactory)
    tenant = factory.SelfAttribute("policy.tenant")
    tool = "get_weather"
    kind = ClusterKind.FAILED_RESULT
    signature = "city not found"
    argument_shape = "{city: str}"
    count = 3
    first_seen = factory.LazyFunction(timezone.now)
    last_seen = factory.LazyFunction(timezone.now)


class HarnessVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = HarnessVersion

    tenant = factory.SubFactory(TenantFactory)
    model = "policy-small"
    number = factory.Sequence(lambda number: number + 1)
    system_prompt = "Call get_weather with a city name only."
    tool_routing = factory.LazyFunction(lambda: {"get_weather": {"action": "route", "to": "get_weather_v2"}})
    proposer = "rule"


class AutoPolicyFactory(EvolutionPolicyFactory):
    """An enabled automatic policy of a model of its own, trained on drift and thumbs-down, with no approval."""

    mode = "auto"
    approval_mode = "automatic"
    signals = factory.LazyFunction(
        lambda: {"drift_js": {"op": ">", "threshold": 0.2}, "thumbs_down_rate": {"op": ">", "threshold": 0.3}}
    )
    update_kinds = factory.LazyFunction(lambda: ["weights"])
    recipe = factory.LazyFunction(
        lambda: {"learning_rate": 1e-4, "samples_per_step": 4, "staleness_bound": 4, "evaluate_every": 2}
    )
    gate = factory.LazyFunction(lambda: {"environment": "weather", "cases": 2, "seed": 0, "min_gain": 0.0})
    release_plan = factory.LazyFunction(lambda: {"stages": [50], "stage_min_seconds": 0})
    cooldown_seconds = 300
