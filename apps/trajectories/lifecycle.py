"""How sessions end, and what becomes of a step that arrives after its session's trajectory ended.

A trajectory ends (status complete or aborted, `ended_at`, `end_reason`) in one of five ways: the agent
calls `/rl/end_session` (`agent`), the agent sends `X-Session-End: true` on a generation request
(`signal`), a person or back-end calls the end API or the console's button (`api`), the session has had no
step for its tenant's `session_idle_seconds` (`idle`, the beat task `trajectories.close_idle`), or a replay
finishes (`replay`). Every end goes through `_close`, which saves `status` with `update_fields`, so the
qualification receiver (apps/qualification/triggers.py) enqueues the gates and evaluators on commit, exactly
as for an agent's own end.

A late step (one whose session's trajectory has ended) never reopens or changes the ended trajectory:
`steps_ingest` stores it in the session's continuation, a trajectory of its own with the session id
`<session_id>~2` (then `~3`, ...) and `continues` naming the trajectory it follows (`late_step_target`).
Later steps of the session follow into the open continuation; once that one ends too, the next late step
opens the next one.
"""

import logging
import re
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict
from apps.core.selectors import get_in_tenant
from apps.tenants.models import Tenant
from apps.trajectories.models import (
    EndReason,
    Step,
    Trajectory,
    TrajectoryStatus,
    trajectory_id_for,
)
from apps.trajectories.selectors import TrajectoryNotFound

logger = logging.getLogger(__name__)

IDLE_ACTOR = Actor.system("session-idle")
DEFAULT_IDLE_SECONDS = 600  # a tenant without a policy row (TenantPolicy's default)
MAX_CONTINUATIONS = 1000  # a session past this many ended continuations has its late steps refused
SESSION_ID_LENGTH = 200  # Trajectory.session_id
_CONTINUATION_NAME = re.compile(r"^(?P<root>.*)~(?P<number>\d+)$")


class TrajectoryAlreadyEnded(Conflict):
    code = "trajectory_already_ended"


def _close(trajectory: Trajectory, *, status: str, reason: str, now: datetime | None = None) -> Trajectory:
    """Ends a locked, open trajectory. `update_fields` names `status`: the qualification receiver reacts."""
    trajectory.status = status
    trajectory.ended_at = now or timezone.now()
    trajectory.end_reason = reason
    trajectory.save(update_fields=["status", "ended_at", "end_reason"])
    return trajectory


def _locked_continuation(trajectory: Trajectory) -> Trajectory | None:
    return (
        Trajectory.objects.select_for_update()
        .filter(tenant_id=trajectory.tenant_id, continues=trajectory)
        .first()
    )


def _open_end_of_chain(trajectory: Trajectory) -> Trajectory | None:
    """The open trajectory of `trajectory`'s session: itself, or the continuation its late steps went to
    (locked, in chain order). None when the session has nothing open."""
    current = trajectory
    for _ in range(MAX_CONTINUATIONS):
        if current.status == TrajectoryStatus.OPEN:
            return current
        following = _locked_continuation(current)
        if following is None:
            return None
        current = following
    return None


@transaction.atomic
def session_trajectory_end(
    *, tenant: Tenant, trajectory_id, status: str = TrajectoryStatus.COMPLETE, reason: str = EndReason.AGENT
) -> Trajectory:
    """Ends the session the trajectory records: the trajectory itself while open, or, when it was closed
    meanwhile (idle) and the session went on in a continuation, that open continuation; returns the one it
    ended. Idempotent: a session with nothing open is left as it is (the trajectory is returned). Tenancy:
    `tenant`'s rows only (another tenant's id raises Trajectory.DoesNotExist). Locking: the trajectory, then
    its continuations in chain order."""
    trajectory = Trajectory.objects.select_for_update().get(tenant=tenant, pk=trajectory_id)
    open_one = _open_end_of_chain(trajectory)
    if open_one is None:
        return trajectory
    return _close(open_one, status=status, reason=reason)


@transaction.atomic
def session_end_by_signal(*, tenant_id: int, session_id: str) -> Trajectory | None:
    """The agent's `X-Session-End` header: ends the session `session_id` of tenant `tenant_id` (reason
    `signal`) as `session_trajectory_end` does. The gateway calls it after flushing the journal, so the
    request's own step is stored first. None when the session has no trajectory (nothing was recorded)."""
    trajectory = (
        Trajectory.objects.select_for_update()
        .filter(tenant_id=tenant_id, pk=trajectory_id_for(tenant_id=tenant_id, session_id=session_id))
        .first()
    )
    if trajectory is None:
        return None
    open_one = _open_end_of_chain(trajectory)
    if open_one is None:
        return trajectory
    return _close(open_one, status=TrajectoryStatus.COMPLETE, reason=EndReason.SIGNAL)


@transaction.atomic
def trajectory_end_by_request(
    *, tenant: Tenant, trajectory_id, actor: Actor, status: str = TrajectoryStatus.COMPLETE
) -> Trajectory:
    """The end API and the console's button: ends this very trajectory (reason `api`), audited
    `trajectory.end`. Raises TrajectoryAlreadyEnded (409) when it is no longer open, saying how and when it
    ended; nothing changes then. Tenancy: another tenant's id answers like a missing one (404)."""
    trajectory = get_in_tenant(
        Trajectory.objects.select_for_update(),
        tenant=tenant,
        pk=trajectory_id,
        code="trajectory_not_found",
        error=TrajectoryNotFound,
    )
    if trajectory.status != TrajectoryStatus.OPEN:
        how = f" ({trajectory.end_reason})" if trajectory.end_reason else ""
        raise TrajectoryAlreadyEnded(
            f"the trajectory already ended{how} at {trajectory.ended_at:%Y-%m-%d %H:%M:%S} UTC "
            f"with status {trajectory.status}",
            fields={"status": [trajectory.status]},
        )
    _close(trajectory, status=status, reason=EndReason.API)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="trajectory.end",
        target=trajectory,
        data={"status": status, "reason": EndReason.API, "steps": trajectory.step_count},
    )
    return trajectory


# ---- idle timeout -----------------------------------------------------------------------------------------


def _idle_seconds(tenant: Tenant) -> int:
    from apps.tenants.models import TenantPolicy

    seconds = (
        TenantPolicy.objects.filter(tenant=tenant).values_list("session_idle_seconds", flat=True).first()
    )
    return DEFAULT_IDLE_SECONDS if seconds is None else seconds


def trajectories_idle(*, tenant: Tenant, idle_seconds: int, now: datetime):
    """`tenant`'s open trajectories whose last activity (the newest step's time, else `started_at`) is more
    than `idle_seconds` before `now`, annotated with `last_activity_at`."""
    newest_step = (
        Step.objects.filter(tenant=tenant, trajectory=OuterRef("pk"))
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    return (
        Trajectory.objects.for_tenant(tenant)
        .filter(status=TrajectoryStatus.OPEN)
        .annotate(last_activity_at=Coalesce(Subquery(newest_step), "started_at"))
        .filter(last_activity_at__lt=now - timedelta(seconds=idle_seconds))
    )


@transaction.atomic
def _close_idle_batch(*, tenant: Tenant, ids: list, cutoff: datetime, now: datetime) -> int:
    """Locks the batch (primary-key order, as steps_ingest does) and closes the rows still open and still
    idle: a step stored since they were selected keeps its trajectory open."""
    rows = list(
        Trajectory.objects.select_for_update()
        .filter(tenant=tenant, pk__in=ids, status=TrajectoryStatus.OPEN)
        .order_by("pk")
    )
    newest = dict(
        Step.objects.filter(tenant=tenant, trajectory_id__in=[row.pk for row in rows])
        .values("trajectory_id")
        .annotate(newest=Max("created_at"))
        .values_list("trajectory_id", "newest")
    )
    closed = 0
    for row in rows:
        if (newest.get(row.pk) or row.started_at) < cutoff:
            _close(row, status=TrajectoryStatus.COMPLETE, reason=EndReason.IDLE, now=now)
            closed += 1
    return closed


def trajectories_close_idle(
    *, tenant: Tenant, now: datetime | None = None, batch_size: int = 200, max_batches: int = 10
) -> dict:
    """Closes `tenant`'s open trajectories idle for longer than its policy's `session_idle_seconds`
    (0: never), status complete and reason `idle`, at most `max_batches` batches of `batch_size` per call,
    each batch its own transaction; the rest waits for the next run. Idempotent: a closed row is never
    selected again, and each row is checked again under its lock. Each close enqueues qualification on
    commit (apps/qualification/triggers.py). Audited once per call that closed something
    (`trajectory.idle_close`: count and timeout). Tenancy: `tenant`'s rows only."""
    now = now or timezone.now()
    idle_seconds = _idle_seconds(tenant)
    summary = {"closed": 0, "remaining": 0, "idle_seconds": idle_seconds}
    if idle_seconds <= 0:
        return summary
    cutoff = now - timedelta(seconds=idle_seconds)
    idle = trajectories_idle(tenant=tenant, idle_seconds=idle_seconds, now=now).order_by("pk")
    last_seen = None
    for _ in range(max_batches):
        page = idle if last_seen is None else idle.filter(pk__gt=last_seen)
        ids = list(page.values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        summary["closed"] += _close_idle_batch(tenant=tenant, ids=ids, cutoff=cutoff, now=now)
        last_seen = ids[-1]
    else:
        summary["remaining"] = idle.count()
    if summary["closed"]:
        with transaction.atomic():
            audit_record(tenant=tenant, actor=IDLE_ACTOR, verb="trajectory.idle_close", data=summary)
    return summary


def dangerously_trajectories_close_idle_all(
    *, now: datetime | None = None, batch_size: int = 200, max_batches: int = 10
) -> dict:
    """Beat's entry: `trajectories_close_idle` for every tenant with an open trajectory (a deliberate
    cross-tenant loop; each tenant's rows are closed and audited on their own). Returns {tenant slug:
    summary} for the tenants where something was closed or remains."""
    from apps.tenants.selectors import tenant_list_all

    with_open = Trajectory.objects.filter(status=TrajectoryStatus.OPEN).values("tenant_id")
    results = {}
    for tenant in tenant_list_all().filter(pk__in=with_open):
        summary = trajectories_close_idle(
            tenant=tenant, now=now, batch_size=batch_size, max_batches=max_batches
        )
        if summary["closed"] or summary["remaining"]:
            results[tenant.slug] = summary
    return results


# ---- late steps -------------------------------------------------------------------------------------------


def _continuation_session_id(ended: Trajectory) -> str:
    """`<root>~<n+1>` after `<root>~<n>` (the session's first trajectory counts as 1), skipping a session id
    the tenant already uses for something else."""
    match = _CONTINUATION_NAME.match(ended.session_id) if ended.continues_id else None
    root, number = (match["root"], int(match["number"])) if match else (ended.session_id, 1)
    while True:
        number += 1
        suffix = f"~{number}"
        candidate = root[: SESSION_ID_LENGTH - len(suffix)] + suffix
        if not Trajectory.objects.filter(tenant_id=ended.tenant_id, session_id=candidate).exists():
            return candidate


def late_step_target(ended: Trajectory) -> tuple[str, uuid.UUID | None]:
    """Where a late step of the ended (and locked) trajectory's session goes: (session id, the id of the
    trajectory a new continuation would continue, or None when the session's open continuation exists).
    Locks the continuations it walks. Raises ValueError past MAX_CONTINUATIONS (the journal sets the
    record aside)."""
    current = ended
    for _ in range(MAX_CONTINUATIONS):
        following = _locked_continuation(current)
        if following is None:
            return _continuation_session_id(current), current.pk
        if following.status == TrajectoryStatus.OPEN:
            return following.session_id, None
        current = following
    raise ValueError(f"session {ended.session_id!r} has more than {MAX_CONTINUATIONS} continuations")
