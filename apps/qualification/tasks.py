"""Celery tasks of apps.qualification: a trajectory's gates."""

from celery import shared_task

from apps.qualification.services import qualification_evaluate
from areal_web.queues import Queue


@shared_task(
    name="qualification.evaluate",
    queue=Queue.DEFAULT.value,
    ignore_result=True,
    max_retries=3,
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
)
def evaluate_trajectory(trajectory_id: str) -> dict:
    """Runs the qualification gates over one trajectory and upserts its verdict. Idempotent (one verdict
    row per trajectory, overwritten); enqueued when a trajectory ends, gets a reward or a review, and on
    demand. May enqueue the same task for later identical trajectories (duplicates)."""
    row = qualification_evaluate(trajectory_id=trajectory_id)
    if row is None:
        return {"trajectory_id": trajectory_id, "status": "missing"}
    return {"trajectory_id": trajectory_id, "status": row.status, "reasons": row.reasons}
