"""The signals of one policy over its sliding window (built by the signals slice; this is its interface)."""

from apps.evolution.models import EvolutionPolicy
from apps.tenants.models import Tenant


def signals_compute(*, tenant: Tenant, policy: EvolutionPolicy, now=None) -> dict[str, float | None]:
    """Computes every signal of `policy` over its window ending at `now`, stores one SignalPoint per signal,
    upserts the ToolFailureClusters, publishes them on the `evolution` stream and returns {name: value}."""
    raise NotImplementedError("signals_compute is built by the signals slice")
