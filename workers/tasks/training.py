"""Training jobs on the `train` queue: rows in, workers.engines dataclasses through, a model version out."""

import logging
import socket
import traceback
from pathlib import Path

from celery import shared_task

from areal_web.queues import Queue

logger = logging.getLogger(__name__)


@shared_task(
    name="training.run_job",
    queue=Queue.TRAIN.value,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=False,
    max_retries=0,
)
def run_training_job(job_id: int) -> dict:
    """Runs (or resumes) one training job. Claims it with a conditional update and a fresh lease (a job
    that is final, cancelled or held by nobody answers "skipped"), resumes from the newest checkpoint in
    the job's run directory, checks for cancel and for a lost lease between steps, persists and publishes
    each step's metrics, checkpoints every `checkpoint_every` steps, then exports a Hugging Face directory
    and registers it as a candidate version (apps.training.services.training_job_succeed). acks_late +
    reject_on_worker_lost: a worker killed mid-job leaves the message to be redelivered; where the broker
    cannot redeliver (the embedded filesystem broker), beat's training.requeue_stale sends it again."""
    from apps.training.models import JobStatus
    from apps.training.services import training_job_claim, training_job_finish

    claim = training_job_claim(job_id=job_id, worker=f"{socket.gethostname()}:{_pid()}")
    if claim is None:
        return {"job": job_id, "status": "skipped"}
    job, lease = claim
    try:
        return _run(job, lease)
    except Exception:  # the job fails with its traceback; the task itself does not retry
        logger.exception("training job %s failed", job_id)
        training_job_finish(job_id=job_id, lease=lease, status=JobStatus.FAILED, error=traceback.format_exc())
        return {"job": job_id, "status": "failed"}


@shared_task(name="training.requeue_stale", queue=Queue.DEFAULT.value, ignore_result=True)
def requeue_stale_training_jobs() -> list[int]:
    """Beat: requeues jobs whose worker stopped reporting (AREAL_TRAINING_STALE_SECONDS)."""
    from django.conf import settings

    from apps.training.services import training_jobs_requeue_stale

    return training_jobs_requeue_stale(stale_after_seconds=settings.AREAL_TRAINING_STALE_SECONDS)


def _pid() -> int:
    import os

    return os.getpid()


def _run(job, lease: str) -> dict:
    import torch
    from django.conf import settings

    from apps.core.errors import ValidationFailed
    from apps.training.models import JobStatus
    from apps.training.selectors import training_job_stop_reason, training_records, training_snapshot_hash
    from apps.training.services import (
        training_job_finish,
        training_job_log,
        training_job_record_step,
        training_job_set_counts,
        training_job_succeed,
    )
    from workers.engines import TrainConfig, Trainer, latest_checkpoint, plan_batches
    from workers.inference.modelgen import tokenizer_fingerprint
    from workers.rl.samples import build_samples

    torch.set_num_threads(settings.AREAL_TRAINING_THREADS)
    tenant, base = job.tenant, job.base_version
    snapshot = job.dataset_snapshot
    if (
        training_snapshot_hash(tenant=tenant, trajectory_ids=snapshot["trajectory_ids"])
        != snapshot["content_hash"]
    ):
        raise ValidationFailed("the dataset changed since the job was created (content hash differs)")
    current_version = base.number
    sample_set = build_samples(
        training_records(tenant=tenant, trajectory_ids=snapshot["trajectory_ids"]),
        current_version=current_version,
        eta=job.staleness_bound,
    )
    counts = dict(vars(sample_set.counts).items())
    counts["staleness_histogram"] = [list(pair) for pair in sample_set.staleness_histogram]
    training_job_set_counts(job_id=job.pk, lease=lease, counts=counts)
    samples = sample_set.samples
    if not samples:
        raise ValidationFailed(f"no trainable sample in the snapshot: {counts}")

    config = TrainConfig.from_dict(job.config)
    run_dir = Path(settings.AREAL_TRAINING_DIR) / f"job-{job.pk}"
    resume = latest_checkpoint(run_dir / "checkpoints")
    if resume is not None:
        trainer = Trainer.resume(
            base.checkpoint_path, resume.path, config=config, device=settings.AREAL_TRAINING_DEVICE
        )
        training_job_log(job=job, message=f"resumed from the checkpoint after step {resume.step}")
    else:
        trainer = Trainer(base.checkpoint_path, config, device=settings.AREAL_TRAINING_DEVICE)
        training_job_log(
            job=job,
            message=f"started: {len(samples)} samples ({counts['stale_samples']} stale "
            f"dropped, η={job.staleness_bound}) on {trainer.device}",
        )
    group_key = config.group_by
    plan = plan_batches(
        [getattr(sample, group_key) for sample in samples],
        batch_size=job.batch_size,
        total_steps=job.total_steps,
        seed=config.seed,
    )
    last = None
    for step_index in range(trainer.step_count, job.total_steps):
        stop = training_job_stop_reason(job_id=job.pk, lease=lease)
        if stop == "cancel":
            training_job_finish(job_id=job.pk, lease=lease, status=JobStatus.CANCELLED)
            return {"job": job.pk, "status": "cancelled", "step": step_index}
        if stop == "lost":
            return {"job": job.pk, "status": "lost", "step": step_index}
        last = trainer.step(
            [samples[i] for i in plan[step_index]],
            current_version=current_version,
            data_position=step_index + 1,
        )
        done = step_index + 1
        # The step's metrics are stored before its checkpoint: a worker killed between the two resumes
        # from the checkpoint before and records the step again, rather than resuming after a step whose
        # metrics were never stored.
        reason = training_job_record_step(job_id=job.pk, lease=lease, step=done, values=last.to_dict())
        if reason == "lost":
            return {"job": job.pk, "status": "lost", "step": done}
        if reason == "cancel" and done < job.total_steps:
            training_job_finish(job_id=job.pk, lease=lease, status=JobStatus.CANCELLED)
            return {"job": job.pk, "status": "cancelled", "step": done}
        if done % job.checkpoint_every == 0 and done < job.total_steps:
            trainer.checkpoint(run_dir / "checkpoints")

    export_dir = Path(settings.AREAL_MODELS_DIR) / base.name / f"job-{job.pk}"
    trainer.export(export_dir)
    if tokenizer_fingerprint(export_dir) != tokenizer_fingerprint(base.checkpoint_path):
        raise ValidationFailed("the exported tokenizer differs from the base's")
    summary = {
        "algorithm": job.algorithm,
        "steps": job.total_steps,
        "samples": len(samples),
        "final": last.to_dict() if last else {},
    }
    version = training_job_succeed(
        job_id=job.pk,
        lease=lease,
        checkpoint_path=str(export_dir),
        tokenizer_hash=base.tokenizer_hash,
        metrics={"training": summary},
    )
    if version is None:
        return {"job": job.pk, "status": "lost"}
    return {"job": job.pk, "status": "succeeded", "version": version.pk, "number": version.number}
