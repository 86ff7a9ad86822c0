"""The gateway's fast path for routing a session it has just created.

A session whose id the gateway minted in this very request (no `X-Session-Id`, no session key, no
per-session URL, no earlier conversation it continues) cannot have a route or a backend pin yet, so
nothing needs to be read for it: its version comes from the cached release plan by the same stable hash
the releases app uses, and its backend from a per-process snapshot of the healthy candidates (refreshed
every couple of seconds) as the least loaded per unit of weight, counting the sessions this process has
placed since the snapshot. The route and pin records are then written off the request path, on the
journal's database thread, so later turns (in any gateway process) find them. Every other session goes
through the database routers (apps.releases.version_routing, apps.inference.services.backend_for_session).
"""

import logging
import time
from dataclasses import dataclass, field

from apps.gateway.db import flusher_database
from apps.gateway.single_flight import single_flight

logger = logging.getLogger(__name__)
SNAPSHOT_SECONDS = 2.0
_snapshots: dict[tuple, "CandidateSnapshot"] = {}


@dataclass
class CandidateSnapshot:
    expires: float
    backends: list
    placed: dict = field(default_factory=dict)  # backend id → sessions this process placed since the snapshot

    def pick(self):
        def load(backend):
            active = backend.active_sessions + self.placed.get(backend.pk, 0)
            return active / backend.weight, active, backend.pk

        chosen = min(self.backends, key=load)
        self.placed[chosen.pk] = self.placed.get(chosen.pk, 0) + 1
        return chosen


def fresh_session_version(*, tenant_id: int, session_id: str, plan) -> str | None:
    """The version a brand-new session gets under `plan` (None: any), as routing_version_for_session would."""
    from apps.releases.version_routing import session_bucket

    if plan is None:
        return None
    if plan.canary is None or plan.percent <= 0:
        return plan.stable
    return (
        plan.canary
        if session_bucket(tenant_id=tenant_id, session_id=session_id) < plan.percent
        else plan.stable
    )


def _load_candidates(tenant_id: int, model: str, version: str | None) -> list:
    from apps.inference.selectors import backend_candidates
    from apps.tenants.models import Tenant

    return list(backend_candidates(tenant=Tenant(pk=tenant_id), served_model=model, model_version=version))


async def candidates_for(*, tenant_id: int, model: str, version: str | None, load) -> CandidateSnapshot:
    key = (tenant_id, model, version)
    snapshot = _snapshots.get(key)
    if snapshot is not None and snapshot.expires >= time.monotonic():
        return snapshot

    async def refresh() -> CandidateSnapshot:
        backends = await load(_load_candidates)(tenant_id, model, version)
        if len(_snapshots) > 10_000:
            _snapshots.clear()
        _snapshots[key] = CandidateSnapshot(expires=time.monotonic() + SNAPSHOT_SECONDS, backends=backends)
        return _snapshots[key]

    return await single_flight(("candidates", *key), refresh)


def candidates_clear() -> None:
    _snapshots.clear()


_unrecorded: list[tuple] = []  # (tenant id, model, session id, backend id, plan) not yet written


def remember_fresh_route(*, tenant_id: int, model: str, session_id: str, backend_id: int, plan) -> None:
    """Queues the new session's route and pin; `routes_flush` writes the queue in one go."""
    _unrecorded.append((tenant_id, model, session_id, backend_id, plan))


def _write(routes: list[tuple]) -> None:
    from apps.inference.services import session_pins_record
    from apps.releases.version_routing import routing_version_for_session

    session_pins_record(
        pins=[
            (tenant_id, model, session_id, backend_id)
            for tenant_id, model, session_id, backend_id, _ in routes
        ]
    )
    for tenant_id, model, session_id, _, plan in routes:
        if plan is not None and plan.canary is not None:  # only a canary split needs the assignment kept
            routing_version_for_session(tenant_id=tenant_id, model=model, session_id=session_id, plan=plan)


async def routes_flush() -> int:
    """Writes every queued route on the journal's database thread; a failure costs only stickiness, so it
    is logged. Returns how many were written."""
    routes = _unrecorded[:]
    del _unrecorded[: len(routes)]
    if routes:
        try:
            await flusher_database(_write)(routes)
        except Exception:
            logger.exception("could not record the routes of %d new sessions", len(routes))
    return len(routes)
