"""Reads of the control plane's tables, always within one tenant."""

from apps.core.selectors import get_in_tenant
from apps.evolution.models import (
    OPEN_DECISION_STATUSES,
    Decision,
    EvolutionPolicy,
    HarnessVersion,
    SignalPoint,
    ToolFailureCluster,
)
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


def policy_list(*, tenant: Tenant):
    """The tenant's policies, by model then agent."""
    return EvolutionPolicy.objects.for_tenant(tenant).order_by("model", "agent_name", "id")


def decision_list(*, tenant: Tenant, policy_id=None, status: str | None = None, kind: str | None = None):
    """The tenant's decisions, newest first, optionally of one policy, status or kind."""
    rows = (
        Decision.objects.for_tenant(tenant)
        .select_related("version", "harness")
        .order_by("-created_at", "-id")
    )
    if policy_id is not None:
        rows = rows.filter(policy_id=policy_id)
    if status:
        rows = rows.filter(status=status)
    if kind:
        rows = rows.filter(kind=kind)
    return rows


def decision_get(*, tenant: Tenant, decision_id) -> Decision:
    return get_in_tenant(
        Decision.objects.select_related("version", "harness"),
        tenant=tenant,
        code="decision_not_found",
        pk=decision_id,
    )


def signal_series(*, tenant: Tenant, policy: EvolutionPolicy, name: str | None = None, since=None):
    """The policy's signal points, oldest first, optionally of one signal and from `since` on."""
    rows = SignalPoint.objects.for_tenant(tenant).filter(policy=policy).order_by("at", "id")
    if name:
        rows = rows.filter(name=name)
    if since is not None:
        rows = rows.filter(at__gte=since)
    return rows


def cluster_list(*, tenant: Tenant, policy_id=None):
    """Tool-failure clusters, the most frequent first."""
    rows = ToolFailureCluster.objects.for_tenant(tenant).order_by("-count", "-last_seen", "id")
    if policy_id is not None:
        rows = rows.filter(policy_id=policy_id)
    return rows


def harness_version_list(*, tenant: Tenant, model: str | None = None):
    """Harness versions, newest first, optionally of one model."""
    rows = HarnessVersion.objects.for_tenant(tenant).order_by("model", "-number")
    if model:
        rows = rows.filter(model=model)
    return rows


def harness_version_get(*, tenant: Tenant, harness_id) -> HarnessVersion:
    return get_in_tenant(HarnessVersion, tenant=tenant, code="harness_version_not_found", pk=harness_id)
