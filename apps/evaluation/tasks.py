"""Celery tasks of apps.evaluation: eval runs (eval queue) and their stale-run requeue (beat)."""

from celery import shared_task
from django.conf import settings

from apps.evaluation.services import eval_runs_requeue_stale
from apps.loop.eval_runs import eval_run_execute


@shared_task(
    name="evaluation.execute_run",
    acks_late=True,
    max_retries=0,
    soft_time_limit=3600,
    time_limit=3700,
)
def execute_eval_run(run_id: int) -> dict:
    """Executes an eval run through the gateway (see apps.loop.eval_runs). Tenant-scoped by the run.
    Idempotent and resumable: claimed by a conditional update, cases already scored are skipped, each result
    is written once per (run, case); a killed worker's run is requeued by beat (evaluation.requeue_stale)
    once its heartbeat is AREAL_EVAL_STALE_SECONDS old, or taken over when the broker redelivers it."""
    return eval_run_execute(run_id=run_id)


@shared_task(name="evaluation.requeue_stale", ignore_result=True)
def requeue_stale_eval_runs() -> list[int]:
    """Beat: requeues runs whose worker stopped reporting (AREAL_EVAL_STALE_SECONDS); see
    apps.evaluation.services.eval_runs_requeue_stale."""
    return eval_runs_requeue_stale(stale_after_seconds=settings.AREAL_EVAL_STALE_SECONDS)
