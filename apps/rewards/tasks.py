"""Celery tasks of apps.rewards: evaluators over a trajectory (eval queue)."""

from celery import shared_task

from apps.rewards.runner import evaluators_run
from areal_web.queues import Queue


@shared_task(
    name="rewards.run_evaluators",
    queue=Queue.EVAL.value,
    ignore_result=True,
    max_retries=3,
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
)
def run_evaluators(trajectory_id: str, evaluator_id: int | None = None) -> dict:
    """Runs the trajectory's tenant's enabled evaluators, or only `evaluator_id` (apps.rewards.runner).
    Idempotent: one reward per evaluator version and trajectory. An evaluator that cannot judge is skipped
    (terminal); a ConnectionError is retried (at most 3 times, backing off). Each stored reward enqueues the
    trajectory's qualification."""
    return evaluators_run(trajectory_id=trajectory_id, evaluator_id=evaluator_id)
