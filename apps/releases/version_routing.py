"""Routing reads for the gateway: which model version a session of a tenant's model goes to.

`routing_plan` is cached per process for `AREAL_ROUTING_CACHE_SECONDS` (a stage change or a rollback reaches
new sessions within that time); `routing_version_for_session` gives a new session its version by a stable hash
of tenant and session id against the canary percentage, and records that first assignment so the session keeps
its version for its life, across stage changes and gateway processes. That record is the one write here: it is
insert-once on a unique key, part of reading a route, and owned by this app like all routing state.
"""

import hashlib
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.releases.models import RoutingState, SessionRoute

MISSING = object()
_plans: dict[tuple[int, str], tuple[float, "RoutingPlan | None"]] = {}


@dataclass(frozen=True)
class RoutingPlan:
    """Versions as the backends name them (`InferenceBackend.model_version`: the version number)."""

    stable: str
    stable_id: int
    canary: str | None
    canary_id: int | None
    percent: float
    release_id: int | None

    def allows(self, version: str | None) -> bool:
        return version is not None and version in {self.stable, self.canary}


def session_bucket(*, tenant_id: int, session_id: str) -> float:
    """A stable point in [0, 100) for the session: the same in every process and after restarts."""
    digest = hashlib.blake2b(f"{tenant_id}:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 10_000 / 100


def _load(tenant_id: int, model: str) -> RoutingPlan | None:
    row = (
        RoutingState.objects.filter(tenant_id=tenant_id, model=model)
        .select_related("stable", "canary")
        .first()
    )
    if row is None:
        return None
    return RoutingPlan(
        stable=str(row.stable.number),
        stable_id=row.stable_id,
        canary=str(row.canary.number) if row.canary else None,
        canary_id=row.canary_id,
        percent=row.canary_percent if row.canary else 0.0,
        release_id=row.release_id,
    )


def routing_plan_cached(*, tenant_id: int, model: str):
    """The cached plan without touching the database, or MISSING when it must be (re)loaded."""
    entry = _plans.get((tenant_id, model))
    if entry is None or entry[0] < time.monotonic():
        return MISSING
    return entry[1]


def routing_plan(*, tenant_id: int, model: str) -> RoutingPlan | None:
    """The tenant's routing for `model`; None when no release ever set one (any backend of the model serves)."""
    cached = routing_plan_cached(tenant_id=tenant_id, model=model)
    if cached is not MISSING:
        return cached
    plan = _load(tenant_id, model)
    if len(_plans) > 10_000:
        _plans.clear()
    _plans[(tenant_id, model)] = (time.monotonic() + settings.AREAL_ROUTING_CACHE_SECONDS, plan)
    return plan


def routing_cache_clear() -> None:
    _plans.clear()


def routing_version_for_session(
    *, tenant_id: int, model: str, session_id: str, plan: RoutingPlan | None
) -> str | None:
    """The version this session must be served by (None: any). A pinned session (an eval run's) gets its
    pin; a session already assigned keeps its version while the plan still serves it; a new session during a
    canary is hashed to the canary when its bucket is below the stage's percentage, and the choice is kept."""
    route = (
        SessionRoute.objects.filter(tenant_id=tenant_id, model=model, session_id=session_id)
        .values("pk", "version_id", "version__number", "pinned")
        .first()
    )
    if route is not None:
        version = str(route["version__number"])
        if route["pinned"] or (plan is not None and plan.allows(version)):
            return version
    if plan is None:
        return None
    if plan.canary is None or plan.percent <= 0:
        return plan.stable
    to_canary = session_bucket(tenant_id=tenant_id, session_id=session_id) < plan.percent
    version, version_id = (plan.canary, plan.canary_id) if to_canary else (plan.stable, plan.stable_id)
    if route is not None:
        SessionRoute.objects.filter(pk=route["pk"], pinned=False).update(
            version_id=version_id, release_id=plan.release_id
        )
        return version
    try:
        with transaction.atomic():
            SessionRoute.objects.create(
                tenant_id=tenant_id,
                model=model,
                session_id=session_id,
                version_id=version_id,  # type: ignore[misc]  # a plan with a canary has the canary's id
                release_id=plan.release_id,
            )
    except IntegrityError:  # a concurrent first call of the same session won: follow it
        winner = (
            SessionRoute.objects.filter(tenant_id=tenant_id, model=model, session_id=session_id)
            .values("version__number")
            .first()
        )
        return str(winner["version__number"]) if winner else version
    return version
