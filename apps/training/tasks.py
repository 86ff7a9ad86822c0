"""Celery tasks of apps.training: training jobs and online runs (train queue), the stale-job requeue (beat).
The runs themselves are runners in apps/loop/training_runs.py."""

from celery import shared_task
from django.conf import settings

from apps.loop.training_runs import online_run_execute, training_job_execute
from apps.training.jobs import training_jobs_requeue_stale


@shared_task(
    name="training.run_job",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=False,
    max_retries=0,
)
def run_training_job(job_id: int) -> dict:
    """Runs (or resumes) one training job (runners.training_job_execute): claimed with a conditional update
    and a lease, resumed from its newest checkpoint, a candidate version registered at the end. acks_late +
    reject_on_worker_lost: a worker killed mid-job leaves the message to be redelivered; where the broker
    cannot redeliver (the embedded filesystem broker), beat's training.requeue_stale sends it again."""
    return training_job_execute(job_id=job_id)


@shared_task(name="training.requeue_stale", ignore_result=True)
def requeue_stale_training_jobs() -> list[int]:
    """Beat: requeues jobs whose worker stopped reporting (AREAL_TRAINING_STALE_SECONDS)."""
    return training_jobs_requeue_stale(stale_after_seconds=settings.AREAL_TRAINING_STALE_SECONDS)


@shared_task(
    name="training.run_online",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    max_retries=0,
)
def run_online(run_id: int, poll_seconds: float = 0.5) -> dict:
    """Runs an OnlineRun until it is stopped or reaches max_steps (runners.online_run_execute), tenant-scoped
    by the run. Idempotency: consumption is recorded once per (run, trajectory); a redelivered task resumes
    from the run's current version (the optimizer state of unpublished steps is lost, by design)."""
    return online_run_execute(run_id=run_id, poll_seconds=poll_seconds)
