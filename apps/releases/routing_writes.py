"""The routing and the versions' statuses as a release or a restore moves them: `routing_set` points a
tenant's model at its stable version (and a canary at a percent of new sessions) and appends the change to the
serving history; `version_status_set` moves a version's status through apps.training. `routing_initialize`,
`session_pin` and `production_restore` are the writes that callers outside a release make."""

from django.db import transaction
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.releases.models import ACTIVE_STATUSES, Release, RoutingState, ServingEvent, SessionRoute
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus


def routing_set(
    *,
    tenant: Tenant,
    model: str,
    stable,
    canary=None,
    percent: float = 0.0,
    release=None,
    actor: Actor,
    reason: str,
) -> RoutingState:
    """Points the tenant's model at `stable` (+ `canary` at `percent` of new sessions) and appends the change
    to the serving history. Locking: the routing row."""
    from apps.releases.version_routing import routing_cache_clear

    now = timezone.now()
    state = RoutingState.objects.select_for_update().filter(tenant=tenant, model=model).first()
    values = {
        "stable": stable,
        "canary": canary,
        "canary_percent": percent if canary else 0.0,
        "release": release,
        "updated_at": now,
    }
    if state is None:
        state = RoutingState.objects.create(tenant=tenant, model=model, **values)
    else:
        for field, value in values.items():
            setattr(state, field, value)
        state.save()
    ServingEvent.objects.create(
        tenant=tenant,
        model=model,
        stable=stable,
        canary=canary,
        canary_percent=state.canary_percent,
        release=release,
        reason=reason[:300],
        actor=actor.label,
        at=now,
    )
    transaction.on_commit(routing_cache_clear)
    return state


def version_status_set(*, tenant: Tenant, actor, version, status, reason) -> None:
    """A version's status through its owner (`apps.training.services.model_version_set_status`, audited
    there), inside the caller's transaction."""
    from apps.training.services import model_version_set_status

    model_version_set_status(tenant=tenant, actor=actor, version_id=version.pk, status=status, reason=reason)


@transaction.atomic
def routing_initialize(*, tenant: Tenant, actor: Actor, version, reason: str = "serving set") -> RoutingState:
    """Declares what serves `version.name` for the tenant when no release has yet (audited)."""
    state = routing_set(tenant=tenant, model=version.name, stable=version, actor=actor, reason=reason)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="routing.set",
        target=version,
        data={"model": version.name, "stable": version.number},
    )
    return state


def session_pin(*, tenant: Tenant, version, session_id: str) -> SessionRoute:
    """Pins a session (an eval run's) to `version` whatever the routing says. Idempotent on the session; not a
    governance act, so not audited (the eval run that asks for it is)."""
    route, _ = SessionRoute.objects.update_or_create(
        tenant=tenant,
        model=version.name,
        session_id=session_id,
        defaults={"version": version, "pinned": True},
    )
    return route


@transaction.atomic
def production_restore(*, tenant: Tenant, actor: Actor, current, previous, reason: str) -> RoutingState:
    """Rolls production back outside a release: `current` (production) → rolled_back, `previous` (a version
    production had before, now retired) → production, the alias moved and every new session routed to it.
    409 when a release of the model is under way (roll that back instead) or `previous` is not retired."""
    from apps.training.services import alias_move

    if current.name != previous.name or current.pk == previous.pk:
        raise ValidationFailed("restore an earlier version of the same model")
    if Release.objects.for_tenant(tenant).filter(model=current.name, status__in=ACTIVE_STATUSES).exists():
        raise Conflict("a release of this model is under way: roll it back instead", code="release_under_way")
    if current.status != VersionStatus.PRODUCTION or previous.status != VersionStatus.RETIRED:
        raise Conflict(
            f"{current} is {current.status} and {previous} {previous.status}: only production can be rolled "
            "back to a retired version",
            code="not_restorable",
        )
    version_status_set(
        tenant=tenant, actor=actor, version=current, status=VersionStatus.ROLLED_BACK, reason=reason
    )
    version_status_set(
        tenant=tenant, actor=actor, version=previous, status=VersionStatus.PRODUCTION, reason=reason
    )
    alias_move(
        tenant=tenant, actor=actor, name=current.name, alias="production", version=previous, reason=reason
    )
    return routing_set(tenant=tenant, model=current.name, stable=previous, actor=actor, reason=reason)
