"""Celery tasks of apps.rewards: evaluators over a trajectory, an LLM judge over a trajectory (eval queue)."""

from celery import shared_task

from apps.loop.judging import judge_evaluator_run
from apps.rewards.evaluator_runs import evaluators_run


@shared_task(
    name="rewards.run_evaluators",
    ignore_result=True,
    max_retries=3,
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    soft_time_limit=600,
    time_limit=660,
)
def run_evaluators(trajectory_id: str, evaluator_id: int | None = None) -> dict:
    """Runs the trajectory's tenant's enabled evaluators, or only `evaluator_id` (apps.rewards.evaluator_runs).
    Idempotent: one reward per evaluator version and trajectory. An evaluator that cannot judge is skipped
    (terminal; a tenant pattern that backtracks is stopped after workers.rewards.evaluators.PATTERN_SECONDS,
    a program after its timeout_s, at most 60 s); a ConnectionError is retried (at most 3 times, backing
    off). The task is stopped after 600 s (soft; 660 s hard). Each stored reward enqueues the trajectory's
    qualification."""
    return evaluators_run(trajectory_id=trajectory_id, evaluator_id=evaluator_id)


@shared_task(
    name="rewards.run_judge",
    ignore_result=True,
    acks_late=True,
    soft_time_limit=2400,
    time_limit=2460,
)
def run_judge(trajectory_id: str, evaluator_id: int) -> dict:
    """Judges one trajectory with one llm_judge evaluator through the gateway (apps.loop.judging). Tenant:
    the evaluator's, which must be the trajectory's. Idempotent: one reward per evaluator version and
    trajectory; a run that succeeded, or that another worker holds, is not judged again. Transient gateway
    errors are retried inside the run (the evaluator's `retries`); a failure is recorded on the run (terminal
    here: re-run it through the run API). A stored reward enqueues the trajectory's qualification."""
    return judge_evaluator_run(trajectory_id=trajectory_id, evaluator_id=evaluator_id)
