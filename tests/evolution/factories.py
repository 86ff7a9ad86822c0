"""Evolution policies written straight to their table (no audit event)."""

import factory

from apps.evolution.models import EvolutionPolicy
from tests.tenants.factories import TenantFactory


class EvolutionPolicyFactory(factory.django.DjangoModelFactory):
    """An enabled automatic policy of a model of its own, trained on drift and thumbs-down, with no approval."""

    class Meta:
        model = EvolutionPolicy

    tenant = factory.SubFactory(TenantFactory)
    model = factory.Sequence(lambda number: f"agent-model-{number}")
    mode = "auto"
    approval_mode = "automatic"
    signals = factory.LazyFunction(
        lambda: {"drift": {"op": ">", "threshold": 0.2}, "thumbs_down_rate": {"op": ">", "threshold": 0.3}}
    )
    update_kinds = factory.LazyFunction(lambda: ["weights"])
    recipe = factory.LazyFunction(
        lambda: {"learning_rate": 1e-4, "samples_per_step": 4, "staleness_bound": 4, "evaluate_every": 2}
    )
    gate = factory.LazyFunction(lambda: {"environment": "weather", "cases": 2, "seed": 0, "min_gain": 0.0})
    release_plan = factory.LazyFunction(lambda: {"stages": [50], "stage_min_seconds": 0})
    cooldown_seconds = 300
