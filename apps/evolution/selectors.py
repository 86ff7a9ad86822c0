"""Reads of the control plane's tables, always within one tenant."""

from apps.core.selectors import get_in_tenant
from apps.evolution.models import OPEN_DECISION_STATUSES, Decision, EvolutionPolicy
from apps.tenants.models import Tenant


def policy_get(*, tenant: Tenant, policy_id) -> EvolutionPolicy:
    return get_in_tenant(EvolutionPolicy, tenant=tenant, code="policy_not_found", pk=policy_id)


def open_decisions(*, tenant: Tenant, policy: EvolutionPolicy):
    """The policy's decisions still waiting or under way (proposed, approved, running), oldest first."""
    return (
        Decision.objects.for_tenant(tenant)
        .filter(policy=policy, status__in=OPEN_DECISION_STATUSES)
        .order_by("created_at", "id")
    )
