from celery import shared_task

from areal_web.queues import Queue


@shared_task(name="evaluation.execute_run", queue=Queue.EVAL.value, acks_late=True, max_retries=0,
             soft_time_limit=3600, time_limit=3700)
def execute_eval_run(run_id: int) -> dict:
    """Executes an eval run through the gateway (see apps.evaluation.runner). Tenant-scoped by the run.
    Idempotent and resumable: claimed by a conditional update, cases already scored are skipped, each result
    is written once per (run, case); a killed worker's run is taken over once its heartbeat is stale."""
    from apps.evaluation.runner import eval_run_execute

    return eval_run_execute(run_id=run_id)
