"""Evolution rows written straight to their tables, without audit events (policies in observe mode)."""

import factory

from apps.evolution.models import EvolutionPolicy
from tests.tenants.factories import TenantFactory


class EvolutionPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EvolutionPolicy

    tenant = factory.SubFactory(TenantFactory)
    model = factory.Sequence(lambda number: f"agent-model-{number}")
    signals = factory.LazyFunction(lambda: {"correction_rate": {"op": ">", "threshold": 0.2}})
