"""What serves a model outside a release: the first production version (routing initialised), and a version
published straight to every backend of its model (AReaL's online mode, or an operator's direct publication).
Both write the serving history, as releases do (`routing_writes.routing_set`).

A model serves through the `production` alias, the versions' statuses and the routing row together: the
gateway routes new sessions to the routing's stable version, a release's baseline is the alias. These services
move all three at once, so they never disagree.
"""

import logging
from typing import TYPE_CHECKING

from django.db import transaction

from apps.audit.services import Actor
from apps.core.errors import Conflict
from apps.releases.models import ACTIVE_STATUSES, Release, RoutingState
from apps.releases.routing_writes import routing_initialize
from apps.tenants.models import Tenant
from apps.training.choices import VersionStatus

if TYPE_CHECKING:
    from apps.training.models import ModelVersion

logger = logging.getLogger(__name__)
# Statuses a version may serve from by direct publication (it becomes production from each of them).
DIRECTLY_SERVABLE = (VersionStatus.CANDIDATE, VersionStatus.PRODUCTION, VersionStatus.RETIRED)


def _lock_tenant(tenant: Tenant) -> None:
    """Serializes serving changes of a tenant (the same row the registry's numbering locks)."""
    type(tenant).objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()


def _refuse_during_release(*, tenant: Tenant, model: str) -> None:
    if Release.objects.for_tenant(tenant).filter(model=model, status__in=ACTIVE_STATUSES).exists():
        raise Conflict(
            f"a release of {model} is under way: it decides what serves until it ends (finish or abort it)",
            code="release_under_way",
        )


def backends_serving(*, tenant: Tenant, version: "ModelVersion") -> list:
    """The tenant's backends of the version's model that hold its weights (a harness-only version's are those
    of the version whose weights it uses), whatever their state."""
    from apps.inference.selectors import backend_list

    weights = version.weights_of or version
    return list(
        backend_list(tenant=tenant, served_model=version.name).filter(model_version=str(weights.number))
    )


@transaction.atomic
def production_set(*, tenant: Tenant, actor: Actor, version_id, reason: str = "") -> RoutingState:
    """Makes a model's first production version serve: its status production, the `production` alias, and the
    routing (every new session to it) with a serving-history row; audited (`model_version.status`,
    `model_alias.move`, `routing.set`). Idempotent: a version that serves this way already changes nothing.
    Tenancy: the version must be the tenant's (404 like a missing one). Refused, with the reason:
    409 `release_under_way` (a release of the model is active), 409 `production_exists` (another version is
    production: production changes through a release), 409 `version_not_servable` (not a candidate),
    409 `version_not_served` (no backend of the model holds its weights: register one serving that version, or
    publish it). Locking: the tenant row."""
    from apps.training.selectors import alias_resolve, model_version_get, model_version_list
    from apps.training.services import alias_move, model_version_set_status

    _lock_tenant(tenant)
    version = model_version_get(tenant=tenant, version_id=version_id)
    _refuse_during_release(tenant=tenant, model=version.name)
    aliased = alias_resolve(tenant=tenant, name=version.name, alias="production")
    others = model_version_list(tenant=tenant, name=version.name, status=VersionStatus.PRODUCTION).exclude(
        pk=version.pk
    )
    current = aliased if aliased is not None and aliased.pk != version.pk else others.first()
    if current is not None:
        raise Conflict(
            f"{current} is production already; production changes through a release of {version}",
            code="production_exists",
        )
    if version.status not in (VersionStatus.CANDIDATE, VersionStatus.PRODUCTION):
        raise Conflict(
            f"{version} is {version.status}; only a candidate can become production",
            code="version_not_servable",
        )
    if not backends_serving(tenant=tenant, version=version):
        weights = version.weights_of or version
        raise Conflict(
            f"no backend of {version.name} serves version {weights.number}: register one whose model version is "
            f"{weights.number} (a server started on {version}'s directory), or publish {version} to the "
            f"model's backends",
            code="version_not_served",
        )
    why = reason or f"production set by {actor.label}"
    version = model_version_set_status(
        tenant=tenant, actor=actor, version_id=version.pk, status=VersionStatus.PRODUCTION, reason=why
    )
    alias_move(tenant=tenant, actor=actor, name=version.name, alias="production", version=version, reason=why)
    state = RoutingState.objects.for_tenant(tenant).filter(model=version.name).first()
    if state is not None and state.stable_id == version.pk and state.canary_id is None:
        return state
    return routing_initialize(tenant=tenant, actor=actor, version=version, reason=why)


def direct_publication_check(*, tenant: Tenant, version: "ModelVersion") -> None:
    """Refuses a direct publication before anything is loaded: 403 `two_person_rule` under the tenant's
    two-person rule (a direct publication is a promotion on one person's word: under the rule production
    changes only through a release a second person approves), 409 `release_under_way` during a release of the
    model, 409 `version_not_servable` for a version that cannot become production (training, canary, rolled
    back). Every direct publication (the REST endpoint, the console, an online run) passes here."""
    from apps.tenants.selectors import two_person_rule_refuse

    two_person_rule_refuse(tenant=tenant, change=f"publishing {version} directly")
    _refuse_during_release(tenant=tenant, model=version.name)
    if version.status not in DIRECTLY_SERVABLE:
        raise Conflict(
            f"{version} is {version.status}; it cannot serve by direct publication",
            code="version_not_servable",
        )


def version_publish_directly(
    *, tenant: Tenant, actor: Actor, version: "ModelVersion", reason: str = ""
) -> list:
    """Direct publication: `version`'s weights loaded into every backend of its model
    (apps.training.publication), and, once at least one took them, the version serves: production (the
    production before it retired), the `production` alias, the routing's stable version and a serving-history
    row naming the backends. A promotion without a release, so it is refused during one
    (direct_publication_check). Not one transaction: each load is a call to a server; the serving change after
    them is atomic. Returns the publication's outcomes (one per backend)."""
    from apps.training.publication import model_version_publish

    direct_publication_check(tenant=tenant, version=version)
    outcomes = model_version_publish(tenant=tenant, actor=actor, version=version)
    loaded = [outcome.backend for outcome in outcomes if outcome.ok]
    if loaded:
        _serve_published(
            tenant=tenant,
            actor=actor,
            version=version,
            reason=f"{reason or f'published by {actor.label}'}: loaded on {', '.join(loaded)}",
        )
    return outcomes


@transaction.atomic
def _serve_published(*, tenant: Tenant, actor: Actor, version: "ModelVersion", reason: str) -> None:
    from apps.training.selectors import model_version_list
    from apps.training.services import alias_move, model_version_set_status

    _lock_tenant(tenant)
    if Release.objects.for_tenant(tenant).filter(model=version.name, status__in=ACTIVE_STATUSES).exists():
        logger.warning(
            "%s was loaded while a release of its model started; the release decides routing", version
        )
        return
    version.refresh_from_db()
    for previous in model_version_list(tenant=tenant, name=version.name, status=VersionStatus.PRODUCTION):
        if previous.pk != version.pk:
            model_version_set_status(
                tenant=tenant,
                actor=actor,
                version_id=previous.pk,
                status=VersionStatus.RETIRED,
                reason=reason,
            )
    if version.status != VersionStatus.PRODUCTION:
        model_version_set_status(
            tenant=tenant, actor=actor, version_id=version.pk, status=VersionStatus.PRODUCTION, reason=reason
        )
    alias_move(
        tenant=tenant,
        actor=actor,
        name=version.name,
        alias="production",
        version=version,
        reason=reason[:300],
    )
    routing_initialize(tenant=tenant, actor=actor, version=version, reason=reason)
