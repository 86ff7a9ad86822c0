"""A training job's task run in this process, with its worker dying at a chosen point: what it left on disk
and in the database lets the next attempt resume without losing a step's metrics."""

import pytest

from apps.audit.services import Actor
from apps.training import jobs
from apps.training.models import JobStatus, TrainingJob, TrainingMetric
from apps.training.tasks import run_training_job
from tests.training.helpers import base_version, qualified_trajectories
from workers.engines import latest_checkpoint

pytestmark = pytest.mark.django_db


class WorkerDied(BaseException):
    """Stands for a SIGKILL: not an Exception, so the task cannot mark the job failed."""


def test_a_worker_dying_before_a_step_is_recorded_leaves_no_checkpoint_after_it(
    tenant, default_model_dir, settings, tmp_path, monkeypatch
):
    settings.AREAL_TRAINING_DIR, settings.AREAL_MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    monkeypatch.setattr(run_training_job, "apply_async", lambda **kwargs: None)
    base = base_version(tenant, default_model_dir)
    qualified_trajectories(tenant, groups=2)
    job = jobs.training_job_create(
        tenant=tenant,
        actor=Actor.system("operator"),
        base_version_id=base.pk,
        algorithm="grpo",
        hyperparameters={"learning_rate": 1e-3},
        batch_size=8,
        total_steps=4,
        checkpoint_every=2,
    )

    record_step = jobs.training_job_record_step

    def dies_recording_step_2(**kwargs):
        if kwargs["step"] == 2:
            raise WorkerDied
        return record_step(**kwargs)

    monkeypatch.setattr(jobs, "training_job_record_step", dies_recording_step_2)
    with pytest.raises(WorkerDied):
        run_training_job(job.pk)
    assert list(TrainingMetric.objects.filter(job=job).values_list("step", flat=True)) == [1]
    # Step 2's checkpoint would have the next attempt start at step 3, and step 2's metrics would never exist.
    assert latest_checkpoint(tmp_path / "runs" / f"job-{job.pk}" / "checkpoints") is None

    monkeypatch.setattr(jobs, "training_job_record_step", record_step)
    assert jobs.training_jobs_requeue_stale(stale_after_seconds=0) == [job.pk]
    assert run_training_job(job.pk)["status"] == "succeeded"
    job = TrainingJob.objects.get(pk=job.pk)
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    assert list(TrainingMetric.objects.filter(job=job).order_by("step").values_list("step", flat=True)) == [
        1,
        2,
        3,
        4,
    ]
