"""Writes to the model registry (versions, their status, aliases) and to training jobs. Every governance act
is audited."""

from datetime import timedelta

from django.db import transaction
from django.db.models import F, Max, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.core.tasking import task_enqueue
from apps.metrics.publish import metrics_publish
from apps.tenants.models import Tenant
from apps.training.models import (
    JOB_TRANSITIONS,
    VERSION_TRANSITIONS,
    Algorithm,
    AliasMove,
    JobStatus,
    ModelAlias,
    ModelVersion,
    TrainingJob,
    TrainingLogLine,
    TrainingMetric,
    VersionStatus,
)

JOBS_STREAM = "training.jobs"  # announces jobs (their status moves) and online runs (their start)


@transaction.atomic
def model_version_register(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    checkpoint_path: str,
    tokenizer_hash: str,
    parent: ModelVersion | None = None,
    status: str = VersionStatus.CANDIDATE,
    dataset_snapshot: dict | None = None,
    metrics: dict | None = None,
    description: str = "",
    number: int | None = None,
    harness=None,
    weights_of: ModelVersion | None = None,
) -> ModelVersion:
    """Registers the next version of `name` (0 for the first). Tenancy: the parent must be this tenant's and
    of the same model; its tokenizer must match (a version with another tokenizer is a new model).
    Harness (apps.evolution): without `harness`, a version inherits its parent's, so the weights an online
    run or a training job learns from a harnessed version are served with the harness they were learnt
    under; `weights_of` makes a harness-only version (served by that version's backends).
    Locking: the tenant row serializes numbering (through the audit append)."""
    if not name or not checkpoint_path or not tokenizer_hash:
        raise ValidationFailed("a model version needs a name, a checkpoint path and a tokenizer hash")
    if status not in VersionStatus.values:
        raise ValidationFailed(f"unknown status {status!r}", fields={"status": ["unknown"]})
    if parent is not None:
        if parent.tenant_id != tenant.pk or parent.name != name:
            raise ValidationFailed(
                "the parent must be a version of the same model in this tenant",
                fields={"parent": ["not a version of this model"]},
            )
        if parent.tokenizer_hash != tokenizer_hash:
            raise ValidationFailed(
                "the tokenizer differs from the parent's; register it as another model",
                fields={"tokenizer_hash": ["differs from the parent's"]},
                code="tokenizer_mismatch",
            )
    if harness is None and parent is not None:
        harness = parent.harness
    if harness is not None and (harness.tenant_id != tenant.pk or harness.model != name):
        raise ValidationFailed(
            f"the harness must be this tenant's, for the model {name}",
            fields={"harness": ["not of this model"]},
        )
    if weights_of is not None and (weights_of.tenant_id != tenant.pk or weights_of.name != name):
        raise ValidationFailed(
            "weights_of must be a version of the same model in this tenant",
            fields={"weights_of": ["not a version of this model"]},
        )
    type(tenant).objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()
    if number is None:
        highest = ModelVersion.objects.filter(tenant=tenant, name=name).aggregate(top=Max("number"))["top"]
        number = 0 if highest is None else highest + 1
    elif ModelVersion.objects.filter(tenant=tenant, name=name, number=number).exists():
        raise Conflict(f"{name} version {number} exists already", code="version_exists")
    version = ModelVersion.objects.create(
        tenant=tenant,
        name=name,
        number=number,
        parent=parent,
        checkpoint_path=checkpoint_path,
        tokenizer_hash=tokenizer_hash,
        status=status,
        dataset_snapshot=dataset_snapshot or {},
        metrics=metrics or {},
        description=description,
        created_by=actor.label,
        harness=harness,
        weights_of=weights_of,
    )
    data = {"name": name, "number": number, "parent": parent.number if parent else None, "status": status}
    if harness is not None:
        data["harness"] = harness.label
    if weights_of is not None:
        data["weights_of"] = weights_of.number
    audit_record(tenant=tenant, actor=actor, verb="model_version.register", target=version, data=data)
    return version


@transaction.atomic
def model_version_set_status(
    *, tenant: Tenant, actor: Actor, version_id: int, status: str, reason: str = ""
) -> ModelVersion:
    """Moves a version along VERSION_TRANSITIONS; a forbidden move raises Conflict (409) and changes nothing.
    Locking: the version row."""
    version = ModelVersion.objects.select_for_update().get(tenant=tenant, pk=version_id)
    if status == version.status:
        return version
    if status not in VERSION_TRANSITIONS.get(version.status, frozenset()):
        raise Conflict(f"{version} is {version.status}; it cannot become {status}", code="invalid_transition")
    previous, version.status = version.status, status
    version.save(update_fields=["status"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model_version.status",
        target=version,
        data={"from": previous, "to": status, "reason": reason},
    )
    return version


@transaction.atomic
def model_version_update_metrics(*, tenant: Tenant, version_id: int, metrics: dict) -> ModelVersion:
    """Merges metrics into the version's (evaluation and training figures); not a governance act."""
    version = ModelVersion.objects.select_for_update().get(tenant=tenant, pk=version_id)
    version.metrics = {**version.metrics, **metrics}
    version.save(update_fields=["metrics"])
    return version


# Aliases that move only with what serves (apps/releases: a release's promotion, a model's first production,
# direct publication), never by hand: the gateway's routing, the statuses and the alias must agree.
SERVING_ALIASES = frozenset({"production"})


def alias_check_movable(*, alias: str) -> None:
    """Refuses (409 `alias_moves_with_serving`) a hand move of an alias that follows what serves."""
    if alias in SERVING_ALIASES:
        raise Conflict(
            f"the {alias} alias moves with what serves: release a version, make a model's first version production "
            "(POST /api/v1/routing/) or publish one directly",
            code="alias_moves_with_serving",
            fields={"alias": ["moves with what serves"]},
        )


@transaction.atomic
def alias_move(
    *, tenant: Tenant, actor: Actor, name: str, alias: str, version: ModelVersion, reason: str = ""
) -> ModelAlias:
    """Points `name:alias` at `version`, appending the move to the alias history (never edited).
    Locking: the alias row (created on first move)."""
    if version.tenant_id != tenant.pk or version.name != name:
        raise ValidationFailed("the version must be one of this model's in this tenant")
    now = timezone.now()
    current = ModelAlias.objects.select_for_update().filter(tenant=tenant, name=name, alias=alias).first()
    previous = current.version if current else None
    if current is not None and previous is not None and previous.pk == version.pk:
        return current
    if current is None:
        current = ModelAlias.objects.create(
            tenant=tenant, name=name, alias=alias, version=version, updated_at=now
        )
    else:
        current.version, current.updated_at = version, now
        current.save(update_fields=["version", "updated_at"])
    AliasMove.objects.create(
        tenant=tenant,
        name=name,
        alias=alias,
        from_version=previous,
        to_version=version,
        actor=actor.label,
        reason=reason,
        moved_at=now,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model_alias.move",
        target=version,
        data={
            "name": name,
            "alias": alias,
            "from": previous.number if previous else None,
            "to": version.number,
            "reason": reason,
        },
    )
    return current


# ---- training jobs ---------------------------------------------------------------------------------


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
