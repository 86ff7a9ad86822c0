"""Reads of releases, their analyses and the serving history; tenant first. Routing reads for the gateway are
in apps.releases.version_routing."""

from django.db.models import Count

from apps.core.selectors import get_in_tenant
from apps.releases.models import (
    SERVING_STATUSES,
    AnalysisRun,
    Release,
    ReleaseEvent,
    RoutingState,
    ServingEvent,
)
from apps.tenants.models import Tenant


def release_list(*, tenant: Tenant, status: str | None = None, model: str | None = None):
    releases = Release.objects.for_tenant(tenant).select_related("candidate", "baseline")
    if status:
        releases = releases.filter(status=status)
    if model:
        releases = releases.filter(model=model)
    return releases.order_by("-created_at", "-id")


def release_model_names(*, tenant: Tenant) -> list[str]:
    """The models the tenant has releases of, for the releases list's filter."""
    return list(
        Release.objects.for_tenant(tenant).order_by("model").values_list("model", flat=True).distinct()
    )


def release_get(*, tenant: Tenant, release_id) -> Release:
    return get_in_tenant(
        Release.objects.select_related("candidate", "baseline"),
        tenant=tenant,
        pk=release_id,
        code="release_not_found",
    )


def release_events(*, tenant: Tenant, release_id):
    return ReleaseEvent.objects.for_tenant(tenant).filter(release_id=release_id).order_by("at", "id")


def release_analyses(*, tenant: Tenant, release_id):
    return AnalysisRun.objects.for_tenant(tenant).filter(release_id=release_id).order_by("at", "id")


def routing_states(*, tenant: Tenant):
    return (
        RoutingState.objects.for_tenant(tenant)
        .select_related("stable", "canary", "release__candidate")
        .order_by("model")
    )


def serving_history(*, tenant: Tenant, model: str | None = None):
    events = ServingEvent.objects.for_tenant(tenant).select_related("stable", "canary", "release__candidate")
    if model:
        events = events.filter(model=model)
    return events.order_by("at", "id")


def serving_at(*, tenant: Tenant, model: str, moment) -> ServingEvent | None:
    """What served the tenant's `model` at `moment`: the serving event in force then (None: nothing recorded
    yet, so any backend of the model served)."""
    return serving_history(tenant=tenant, model=model).filter(at__lte=moment).order_by("-at", "-id").first()


def dangerously_analyzable_release_ids() -> list[tuple[int, int]]:
    """(tenant id, release id) of every tenant's release that a beat tick analyses: only for the beat task."""
    return list(
        Release.objects.filter(
            status__in=["evaluating", "canary", "paused", "awaiting_approval"]
        ).values_list("tenant_id", "pk")
    )


def dangerously_release_tenant(*, release_id):
    """The tenant of a release, None for a missing one: only for the analysis task, which gets a bare id."""
    release = Release.objects.select_related("tenant").filter(pk=release_id).first()
    return release.tenant if release is not None else None


def release_for_dashboard(*, tenant: Tenant) -> Release | None:
    """The release a tenant overview shows: the newest one taking live traffic, else the newest one."""
    releases = release_list(tenant=tenant)
    return releases.filter(status__in=SERVING_STATUSES).first() or releases.first()


def dangerously_release_counts() -> dict[tuple[str, str], int]:
    """(tenant slug, status) → number of releases, over every tenant (the Prometheus endpoint only)."""
    rows = Release.objects.values("tenant__slug", "status").annotate(count=Count("id")).order_by()
    return {(row["tenant__slug"], row["status"]): row["count"] for row in rows}
