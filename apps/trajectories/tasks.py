"""Celery tasks of apps.trajectories: replays (eval queue), the retention purge and the idle-session close
(beat)."""

from celery import shared_task
from django.conf import settings

from apps.loop.replay import trajectory_replay_run
from apps.trajectories.lifecycle import dangerously_trajectories_close_idle_all
from apps.trajectories.retention import dangerously_trajectories_purge_expired_all


@shared_task(
    name="trajectories.replay",
    acks_late=True,
    max_retries=0,
    soft_time_limit=1800,
    time_limit=1900,
)
def replay_trajectory(
    *, tenant_id: int, source_id: str, session_id: str, model: str, model_version: str = ""
) -> int:
    """Replays a trajectory's observations against `model` into the replay trajectory `session_id`
    (opened by apps.loop.replay.trajectory_replay_start). Tenant-scoped by `tenant_id`. Idempotent:
    step ids are derived from (replay session, source step), so a redelivered task records nothing twice."""
    return trajectory_replay_run(
        tenant_id=tenant_id,
        source_id=source_id,
        session_id=session_id,
        model=model,
        model_version=model_version,
    )


@shared_task(
    name="trajectories.purge_expired",
    max_retries=0,
    soft_time_limit=1800,
    time_limit=1900,
)
def purge_expired_trajectories() -> dict:
    """Beat (every AREAL_RETENTION_PURGE_SECONDS): deletes every tenant's trajectories past retention, with
    their steps, rewards, reviews, qualification and annotations, in bounded batches (apps.trajectories.
    retention). Idempotent: a repeat or a concurrent run finds nothing left to delete; one audit event per
    tenant per run. Returns {tenant slug: counts}."""
    return dangerously_trajectories_purge_expired_all()


@shared_task(
    name="trajectories.close_idle",
    max_retries=0,
    soft_time_limit=300,
    time_limit=330,
)
def close_idle_trajectories() -> dict:
    """Beat (every AREAL_SESSION_IDLE_CHECK_SECONDS): closes every tenant's open trajectories idle for longer
    than its policy's `session_idle_seconds` (reason `idle`), in bounded batches (AREAL_SESSION_IDLE_BATCH_SIZE,
    AREAL_SESSION_IDLE_MAX_BATCHES per tenant per run; apps.trajectories.lifecycle). Each close enqueues
    qualification on commit. Idempotent: a closed trajectory is never closed again, and a repeat or
    concurrent run finds nothing more. Returns {tenant slug: summary}."""
    return dangerously_trajectories_close_idle_all(
        batch_size=settings.AREAL_SESSION_IDLE_BATCH_SIZE,
        max_batches=settings.AREAL_SESSION_IDLE_MAX_BATCHES,
    )
