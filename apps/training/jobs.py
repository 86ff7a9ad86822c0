"""Writes to training jobs: their creation over a frozen dataset snapshot, the worker's claim under a lease,
each step's metrics, the end (a candidate version registered, or failed or cancelled), cancellation, and the
beat's requeue of stale jobs. Each status move goes along JOB_TRANSITIONS; a job's steps, logs and status are
published on its stream, its status moves on JOBS_STREAM."""

from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.core.tasking import task_enqueue
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant
from apps.training.models import (
    JOB_TRANSITIONS,
    Algorithm,
    JobStatus,
    ModelVersion,
    TrainingJob,
    TrainingLogLine,
    TrainingMetric,
    VersionStatus,
)
from apps.training.services import model_version_register

JOBS_STREAM = "training.jobs"  # announces jobs (their status moves) and online runs (their start)


LORA_ALPHA_PER_RANK = 2  # a console job's LoRA alpha: twice its rank, the usual scaling


def training_hyperparameters(
    *, learning_rate: float, schedule: str, warmup_steps: int, lora_rank: int = 0
) -> dict:
    """The hyperparameters of a job set up from the console's form: a LoRA rank above 0 trains an adapter
    with alpha `LORA_ALPHA_PER_RANK` × rank; 0 is full fine-tuning. `training_job_create` validates them."""
    hyperparameters = {"learning_rate": learning_rate, "schedule": schedule, "warmup_steps": warmup_steps}
    if lora_rank:
        hyperparameters["lora"] = {"rank": lora_rank, "alpha": LORA_ALPHA_PER_RANK * lora_rank}
    return hyperparameters


def _job_config(*, algorithm: str, hyperparameters: dict, total_steps: int) -> dict:
    """The engine config the job will run with, validated now so a bad form never reaches a worker."""
    from workers.engines import TrainConfig

    values = {**hyperparameters, "algorithm": algorithm}
    values.setdefault("total_steps", total_steps * int(values.get("minibatches", 1)))
    try:
        return TrainConfig.from_dict(values).to_dict()
    except (TypeError, ValueError) as error:
        raise ValidationFailed(
            f"invalid hyperparameters: {error}",
            fields={"hyperparameters": [str(error)]},
            code="invalid_hyperparameters",
        ) from None


@transaction.atomic
def training_job_create(
    *,
    tenant: Tenant,
    actor: Actor,
    base_version_id,
    algorithm: str,
    hyperparameters: dict | None = None,
    batch_size: int = 16,
    total_steps: int = 10,
    checkpoint_every: int = 10,
    staleness_bound: int | None = None,
    agent: str | None = None,
    task_id: str | None = None,
    max_trajectories: int | None = None,
    description: str = "",
) -> TrainingJob:
    """Creates a queued job over a snapshot of the tenant's qualified training queue (trajectory ids and a
    content hash, frozen now) and enqueues it on the `train` queue on commit. Tenancy: the base version
    must be this tenant's (else NotFound, like a missing one). Refuses an empty snapshot."""
    from apps.training.selectors import model_version_get, training_queue_snapshot

    if algorithm not in Algorithm.values:
        raise ValidationFailed(f"unknown algorithm {algorithm!r}", fields={"algorithm": ["unknown"]})
    if batch_size < 1 or total_steps < 1 or checkpoint_every < 1:
        raise ValidationFailed("batch_size, total_steps and checkpoint_every must be >= 1")
    base = model_version_get(tenant=tenant, version_id=base_version_id)
    config = _job_config(algorithm=algorithm, hyperparameters=hyperparameters or {}, total_steps=total_steps)
    snapshot = training_queue_snapshot(tenant=tenant, agent=agent, task_id=task_id, limit=max_trajectories)
    if not snapshot["trajectory_ids"]:
        raise ValidationFailed(
            "the training queue has no qualified trajectory for these filters",
            code="empty_dataset",
            fields={"dataset": ["no qualified trajectory"]},
        )
    job = TrainingJob.objects.create(
        tenant=tenant,
        algorithm=algorithm,
        base_version=base,
        config=config,
        batch_size=batch_size,
        total_steps=total_steps,
        checkpoint_every=checkpoint_every,
        staleness_bound=staleness_bound,
        dataset_snapshot=snapshot,
        description=description,
        created_by=actor.label,
    )
    TrainingLogLine.objects.create(
        tenant=tenant,
        job=job,
        message=(
            f"queued: {algorithm} from {base.label}, {len(snapshot['trajectory_ids'])} trajectories "
            f"(hash {snapshot['content_hash'][:12]}), {total_steps} steps of {batch_size}"
        ),
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="training_job.create",
        target=job,
        data={
            "algorithm": algorithm,
            "base": base.label,
            "trajectories": len(snapshot["trajectory_ids"]),
            "content_hash": snapshot["content_hash"],
            "total_steps": total_steps,
        },
    )
    transaction.on_commit(lambda: training_job_enqueue(job_id=job.pk))
    return job


def training_job_enqueue(*, job_id: int) -> None:
    """Sends the job to the training queue (settings.AREAL_TRAINING_QUEUE). Idempotent on the worker side:
    the claim refuses a job that is not queued or running."""
    from django.conf import settings

    task_enqueue("training.run_job", job_id, queue=settings.AREAL_TRAINING_QUEUE)


def training_job_claim(*, job_id: int, worker: str) -> tuple[TrainingJob, str] | None:
    """Claims the job with a conditional update (queued, or running after a lost worker → running) and a
    fresh lease; None when it is final, cancelled or missing. The lease fences out a previous holder."""
    import uuid

    lease = uuid.uuid4().hex
    now = timezone.now()
    claimed = TrainingJob.objects.filter(
        pk=job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING], cancel_requested=False
    ).update(
        status=JobStatus.RUNNING,
        lease=lease,
        worker=worker[:200],
        attempts=F("attempts") + 1,
        heartbeat_at=now,
        started_at=Coalesce("started_at", Value(now)),
    )
    if not claimed:
        return None
    job = TrainingJob.objects.select_related("tenant", "base_version").get(pk=job_id)
    training_job_log(job=job, message=f"claimed by {worker} (attempt {job.attempts})")
    _publish_job(job)
    return job, lease


def training_job_log(*, job: TrainingJob, message: str, level: str = "info") -> None:
    TrainingLogLine.objects.create(tenant_id=job.tenant_id, job=job, message=message, level=level)
    metrics_publish(
        tenant_id=job.tenant_id,
        stream=training_job_stream(job.pk),
        payload={"log": {"level": level, "message": message}},
    )


@transaction.atomic
def training_job_record_step(*, job_id: int, lease: str, step: int, values: dict) -> str | None:
    """Upserts the step's metrics, moves progress, heartbeat and ETA (only while `lease` holds), and
    publishes the point live. Returns None to continue, "cancel" when a cancel was requested, "lost" when
    another worker holds the job now."""
    job = TrainingJob.objects.select_for_update().get(pk=job_id)
    if job.lease != lease or job.status != JobStatus.RUNNING:
        return "lost"
    now = timezone.now()
    TrainingMetric.objects.update_or_create(
        job=job, step=step, defaults={"tenant_id": job.tenant_id, "values": values, "recorded_at": now}
    )
    seconds = float(values.get("seconds") or 0.0)
    remaining = max(job.total_steps - step, 0)
    job.progress_step = step
    job.heartbeat_at = now
    job.eta_at = now + timedelta(seconds=seconds * remaining) if seconds else None
    job.save(update_fields=["progress_step", "heartbeat_at", "eta_at"])
    metrics_publish(
        tenant_id=job.tenant_id,
        stream=training_job_stream(job.pk),
        payload={
            "step": step,
            "total": job.total_steps,
            "values": values,
            "eta_at": job.eta_at.isoformat() if job.eta_at else None,
            "status": job.status,
        },
    )
    return "cancel" if job.cancel_requested else None


@transaction.atomic
def training_job_set_counts(*, job_id: int, lease: str, counts: dict) -> None:
    TrainingJob.objects.filter(pk=job_id, lease=lease).update(sample_counts=counts)


@transaction.atomic
def training_job_finish(
    *, job_id: int, lease: str | None, status: str, error: str = ""
) -> TrainingJob | None:
    """Moves the job to failed or cancelled along JOB_TRANSITIONS (only while `lease` holds; None: any
    holder). Returns None when the lease was lost or the job is final already."""
    job = TrainingJob.objects.select_for_update().get(pk=job_id)
    if (lease is not None and job.lease != lease) or status not in JOB_TRANSITIONS[job.status]:
        return None
    job.status, job.error, job.finished_at, job.lease = status, error[-4000:], timezone.now(), ""
    job.save(update_fields=["status", "error", "finished_at", "lease"])
    training_job_log(
        job=job,
        message=f"{status}" + (f": {error.splitlines()[-1]}" if error else ""),
        level="error" if status == JobStatus.FAILED else "info",
    )
    audit_record(
        tenant=job.tenant,
        actor=Actor.system("training"),
        verb=f"training_job.{status}",
        target=job,
        data={"error": error[-300:]} if error else {},
    )
    _publish_job(job)
    return job


@transaction.atomic
def training_job_succeed(
    *, job_id: int, lease: str, checkpoint_path: str, tokenizer_hash: str, metrics: dict
) -> ModelVersion | None:
    """Registers the trained weights as the next candidate version of the base's model (parent = base,
    the job's dataset snapshot, final metrics) and marks the job succeeded, in one transaction; None when
    the lease was lost."""
    job = TrainingJob.objects.select_for_update().select_related("base_version", "tenant").get(pk=job_id)
    if job.lease != lease or JobStatus.SUCCEEDED not in JOB_TRANSITIONS[job.status]:
        return None
    base = job.base_version
    version = model_version_register(
        tenant=job.tenant,
        actor=Actor.system("training"),
        name=base.name,
        checkpoint_path=checkpoint_path,
        tokenizer_hash=tokenizer_hash,
        parent=base,
        status=VersionStatus.CANDIDATE,
        dataset_snapshot={**job.dataset_snapshot, "job_id": job.pk},
        metrics=metrics,
        description=f"{job.get_algorithm_display()} job {job.pk} from {base.label}",
    )
    job.status, job.produced_version, job.finished_at, job.lease = (
        JobStatus.SUCCEEDED,
        version,
        timezone.now(),
        "",
    )
    job.progress_step = job.total_steps
    job.save(update_fields=["status", "produced_version", "finished_at", "lease", "progress_step"])
    training_job_log(job=job, message=f"succeeded: registered {version.label} (candidate)")
    audit_record(
        tenant=job.tenant,
        actor=Actor.system("training"),
        verb="training_job.succeeded",
        target=job,
        data={"version": version.label},
    )
    _publish_job(job)
    return version


@transaction.atomic
def training_job_cancel(*, tenant: Tenant, actor: Actor, job_id) -> TrainingJob:
    """Queued: cancelled at once (conditional update). Running: flags it; the worker stops before its next
    step and marks it cancelled. Final: Conflict. Tenancy: another tenant's job is NotFound."""
    from apps.training.selectors import training_job_get

    job = training_job_get(tenant=tenant, job_id=job_id)
    if job.is_final:
        raise Conflict(f"job {job.pk} is {job.status} already", code="invalid_transition")
    if TrainingJob.objects.filter(pk=job.pk, status=JobStatus.QUEUED).update(
        status=JobStatus.CANCELLED, cancel_requested=True, finished_at=timezone.now()
    ):
        training_job_log(job=job, message=f"cancelled by {actor.label} before it started")
    else:
        TrainingJob.objects.filter(pk=job.pk).update(cancel_requested=True)
        training_job_log(
            job=job, message=f"cancel requested by {actor.label}; stopping after the current step"
        )
    audit_record(tenant=tenant, actor=actor, verb="training_job.cancel", target=job)
    job.refresh_from_db()
    _publish_job(job)
    return job


def training_jobs_requeue_stale(*, stale_after_seconds: int) -> list[int]:
    """Every tenant's running jobs whose worker has not reported for `stale_after_seconds` (a killed
    worker), and queued jobs waiting as long, are sent to the training queue again; the next claim
    rotates the lease and the job resumes from its last checkpoint. A running job flagged for cancel is
    marked cancelled instead. Returns the requeued ids."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_seconds)
    stale = TrainingJob.objects.filter(
        Q(status=JobStatus.RUNNING, heartbeat_at__lte=cutoff)
        | Q(status=JobStatus.QUEUED, created_at__lte=cutoff)
    )
    requeued = []
    for job in stale.select_related("tenant"):
        if job.cancel_requested:
            training_job_finish(job_id=job.pk, lease=None, status=JobStatus.CANCELLED)
            continue
        training_job_log(
            job=job, message="requeued: no progress report for a while (worker lost?)", level="warning"
        )
        training_job_enqueue(job_id=job.pk)
        requeued.append(job.pk)
    return requeued


def training_job_stream(job_id: int) -> str:
    """The live stream of a job's steps, logs and status."""
    return f"training.job-{job_id}"


def _publish_job(job: TrainingJob) -> None:
    payload = {
        "job": job.pk,
        "status": job.status,
        "step": job.progress_step,
        "total": job.total_steps,
        "produced_version": job.produced_version_id,
    }
    metrics_publish(tenant_id=job.tenant_id, stream=training_job_stream(job.pk), payload=payload)
    metrics_publish(tenant_id=job.tenant_id, stream=JOBS_STREAM, payload=payload)
