"""Training jobs on real Celery worker processes: end to end to a version the embedded server serves, a
worker SIGKILLed mid-job and the job resumed by another, cancel within a step."""

import os
import signal
import time

import httpx
import pytest

from apps.audit.services import Actor
from apps.inference.admin_tokens import inference_admin_token
from apps.inference.models import BackendKind, BackendState
from apps.training.jobs import training_job_cancel, training_job_create, training_jobs_requeue_stale
from apps.training.models import JobStatus, TrainingJob, TrainingMetric
from apps.training.publication import model_version_publish
from tests.inference.factories import BackendFactory
from tests.servers import inference_server
from tests.training.helpers import MODEL, base_version, qualified_trajectories
from tests.workers_support import celery_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
USER = Actor.system("operator")


def wait_for(predicate, *, timeout=240, every=0.3, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out waiting for {what}")


def job_row(job_id) -> TrainingJob:
    return TrainingJob.objects.select_related("produced_version").get(pk=job_id)


def create_job(tenant, base, **fields):
    defaults = {
        "algorithm": "grpo",
        "hyperparameters": {"learning_rate": 1e-3},
        "batch_size": 8,
        "total_steps": 3,
        "checkpoint_every": 1,
    }
    return training_job_create(tenant=tenant, actor=USER, base_version_id=base.pk, **{**defaults, **fields})


def test_a_short_job_produces_a_version_the_embedded_server_serves(
    tmp_path, tenant, default_model_dir, settings
):
    base = base_version(tenant, default_model_dir)
    qualified_trajectories(tenant)
    with celery_worker(log_path=tmp_path / "worker.log") as (_, queue):
        settings.AREAL_TRAINING_QUEUE = queue
        job = create_job(tenant, base)
        wait_for(lambda: job_row(job.pk).is_final, what="the job to end")
    job = job_row(job.pk)
    assert job.status == JobStatus.SUCCEEDED, (job.error, (tmp_path / "worker.log").read_text()[-3000:])
    version = job.produced_version
    assert (version.parent_id, version.number, version.status) == (base.pk, 1, "candidate")
    assert version.dataset_snapshot["content_hash"] == job.dataset_snapshot["content_hash"]
    assert version.metrics["training"]["steps"] == 3
    assert list(TrainingMetric.objects.filter(job=job).values_list("step", flat=True)) == [1, 2, 3]
    assert job.sample_counts["samples"] == 12

    with inference_server(
        default_model_dir, served_model=MODEL, version="0", log_path=tmp_path / "inf.log"
    ) as url:
        backend = BackendFactory(
            tenant=tenant,
            name="embedded",
            base_url=url,
            kind=BackendKind.EMBEDDED,
            served_model=MODEL,
            model_version="0",
            state=BackendState.UP,
        )
        outcomes = model_version_publish(tenant=tenant, actor=USER, version=version)
        assert [outcome.ok for outcome in outcomes] == [True], outcomes
        assert httpx.get(f"{url}/admin/version").status_code == 401  # the admin API needs the token
        admin_headers = {"Authorization": f"Bearer {inference_admin_token(url)}"}
        assert httpx.get(f"{url}/admin/version", headers=admin_headers).json()["version"] == 1
        reply = httpx.post(
            f"{url}/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 3}, timeout=60
        ).json()
        assert reply["policy_version"] == 1
    backend.refresh_from_db()
    assert backend.model_version == "1"
    assert backend.state == BackendState.UP


def test_a_job_whose_worker_is_killed_resumes_on_another_and_finishes(
    tmp_path, tenant, default_model_dir, settings
):
    base = base_version(tenant, default_model_dir)
    qualified_trajectories(tenant, groups=4)
    total = 24
    with celery_worker(log_path=tmp_path / "first.log") as (first, queue):
        settings.AREAL_TRAINING_QUEUE = queue
        job = create_job(tenant, base, total_steps=total, checkpoint_every=2, batch_size=16)
        wait_for(lambda: job_row(job.pk).progress_step >= 5, what="a few steps")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=20)
    killed_at = job_row(job.pk).progress_step
    assert job_row(job.pk).status == JobStatus.RUNNING
    assert killed_at < total

    with celery_worker(queue=queue, log_path=tmp_path / "second.log"):
        assert training_jobs_requeue_stale(stale_after_seconds=0) == [job.pk]
        wait_for(lambda: job_row(job.pk).is_final, what="the resumed job to end")
    job = job_row(job.pk)
    assert job.status == JobStatus.SUCCEEDED, (job.error, (tmp_path / "second.log").read_text()[-3000:])
    assert job.attempts == 2
    messages = list(job.log_lines.values_list("message", flat=True))
    assert any(message.startswith("resumed from the checkpoint after step") for message in messages), messages
    assert list(TrainingMetric.objects.filter(job=job).values_list("step", flat=True)) == list(
        range(1, total + 1)
    )


def test_cancel_stops_a_running_job_within_one_step(tmp_path, tenant, default_model_dir, settings):
    base = base_version(tenant, default_model_dir)
    qualified_trajectories(tenant)
    with celery_worker(log_path=tmp_path / "worker.log") as (_, queue):
        settings.AREAL_TRAINING_QUEUE = queue
        job = create_job(tenant, base, total_steps=200, checkpoint_every=100)
        wait_for(lambda: job_row(job.pk).progress_step >= 2, what="a few steps")
        training_job_cancel(tenant=tenant, actor=USER, job_id=job.pk)
        asked_at = job_row(job.pk).progress_step
        wait_for(lambda: job_row(job.pk).is_final, what="the cancel")
    job = job_row(job.pk)
    assert job.status == JobStatus.CANCELLED
    assert job.produced_version is None
    assert job.progress_step <= asked_at + 1
