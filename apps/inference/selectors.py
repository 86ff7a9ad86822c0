from datetime import timedelta

from django.db.models import Count, Q
from django.utils import timezone

from apps.core.selectors import get_in_tenant
from apps.inference.models import BackendAddressGrant, BackendState, InferenceBackend
from apps.tenants.models import Tenant

# A session that has not called for this long no longer counts toward its backend's load.
ACTIVE_SESSION_WINDOW = timedelta(minutes=10)


def backend_list(*, tenant: Tenant, served_model: str | None = None):
    backends = InferenceBackend.objects.for_tenant(tenant)
    if served_model:
        backends = backends.filter(served_model=served_model)
    return backends


def backend_get(*, tenant: Tenant, backend_id) -> InferenceBackend:
    return get_in_tenant(InferenceBackend, tenant=tenant, pk=backend_id, code="backend_not_found")


def backend_by_name(*, tenant: Tenant, name: str) -> InferenceBackend | None:
    """The tenant's backend of that name (names are unique per tenant), or None."""
    return InferenceBackend.objects.for_tenant(tenant).filter(name=name).first()


def backend_candidates(*, tenant: Tenant, served_model: str, model_version: str | None = None):
    """Healthy backends that may take a new session, annotated with their active-session load."""
    since = timezone.now() - ACTIVE_SESSION_WINDOW
    backends = InferenceBackend.objects.for_tenant(tenant).filter(
        served_model=served_model, state=BackendState.UP, weight__gt=0
    )
    if model_version:
        backends = backends.filter(model_version=model_version)
    return backends.annotate(
        active_sessions=Count("affinities", filter=Q(affinities__last_used_at__gte=since))
    )


def served_models(*, tenant: Tenant) -> list[str]:
    return sorted(
        set(
            InferenceBackend.objects.for_tenant(tenant)
            .filter(state=BackendState.UP)
            .values_list("served_model", flat=True)
        )
    )


def backend_model_versions(*, tenant: Tenant) -> list[tuple[str, str]]:
    """Every (served model, model version) pair among the tenant's backends, sorted, whatever their state:
    what a trajectory can be replayed against."""
    return sorted(set(backend_list(tenant=tenant).values_list("served_model", "model_version")))


def dangerously_backend_list_all_tenants():
    """Every tenant's backends: only for the system health check, never for a request."""
    return InferenceBackend.objects.all()


def backend_grant_list(*, tenant: Tenant):
    """The address grants of the tenant (apps/inference/grants.py)."""
    return BackendAddressGrant.objects.for_tenant(tenant)


def backend_grant_patterns(*, tenant: Tenant) -> list[str]:
    return list(backend_grant_list(tenant=tenant).values_list("address", flat=True))


def dangerously_grant_patterns_of_other_tenants(*, tenant: Tenant) -> list[str]:
    """Every other tenant's grant patterns, without saying whose: only for the grant check, which must know
    whether an address is somebody else's."""
    return list(BackendAddressGrant.objects.exclude(tenant=tenant).values_list("address", flat=True))


def dangerously_backend_urls_of_other_tenants(*, tenant: Tenant, port: int) -> list[str]:
    """The base URLs of other tenants' backends that may be on `port` (those naming it, and those naming no
    port when it is a default one), without saying whose: only for the checks that a server serves one
    tenant (apps/inference/grants.py)."""
    others = InferenceBackend.objects.exclude(tenant=tenant)
    if port not in (80, 443):
        others = others.filter(base_url__contains=f":{port}")
    return list(others.values_list("base_url", flat=True))
