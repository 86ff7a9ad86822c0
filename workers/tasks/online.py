"""Online training (AReaL's online mode) on the `train` queue: one long-running task per OnlineRun."""

import logging
import time
import traceback
from pathlib import Path

from celery import shared_task

from areal_web.queues import Queue

logger = logging.getLogger(__name__)


@shared_task(
    name="training.run_online",
    queue=Queue.TRAIN.value,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    max_retries=0,
)
def run_online(run_id: int, poll_seconds: float = 0.5) -> dict:
    """Runs an OnlineRun until it is stopped or reaches max_steps. Each round: take the qualified
    trajectories the run has not consumed (apps.training.online.online_pending), build samples under the
    staleness bound η against the run's current version V (samples holding a token older than V − η are
    dropped and counted), and once `samples_per_step` samples are waiting, train one decoupled-PPO step on
    them; every `publish_every` steps export the weights, register them as the next version (parent: the
    previous one) and, unless the run leaves serving to releases (`publish_to_backends` off), publish them
    to the model's backends, which then stamp V + 1 on new tokens.
    Idempotency: consumption is recorded once per (run, trajectory); a redelivered task resumes from the
    run's current version (the optimizer state of unpublished steps is lost, by design)."""
    from apps.training.models import OnlineRun, OnlineRunStatus
    from apps.training.online import online_run_finish

    run = (
        OnlineRun.objects.select_related("tenant", "current_version", "base_version")
        .filter(pk=run_id)
        .first()
    )
    if run is None or run.status != OnlineRunStatus.RUNNING:
        return {"run": run_id, "status": "skipped"}
    try:
        return _loop(run, poll_seconds)
    except Exception:
        logger.exception("online run %s failed", run_id)
        online_run_finish(run_id=run_id, status=OnlineRunStatus.FAILED, error=traceback.format_exc())
        return {"run": run_id, "status": "failed"}


def _loop(run, poll_seconds: float) -> dict:
    import torch
    from django.conf import settings

    from apps.audit.services import Actor
    from apps.metrics.publish import metrics_publish
    from apps.training.models import OnlineRun, OnlineRunStatus
    from apps.training.online import (
        online_pending,
        online_run_finish,
        online_run_heartbeat,
        online_run_record_step,
        online_run_settle,
        online_run_stream,
        online_run_take,
    )
    from apps.training.publication import model_version_publish
    from apps.training.selectors import training_records
    from apps.training.services import model_version_register
    from workers.engines import TrainConfig, Trainer
    from workers.rl.samples import build_samples

    torch.set_num_threads(settings.AREAL_TRAINING_THREADS)
    tenant = run.tenant
    actor = Actor.system(f"online-run-{run.pk}")
    config = TrainConfig.from_dict(run.config)
    version = run.current_version
    trainer = Trainer(version.checkpoint_path, config, device=settings.AREAL_TRAINING_DEVICE)
    waiting: dict[str, list] = {}  # trajectory id -> its samples, oldest first, until a step takes them
    steps = run.steps
    while online_run_heartbeat(run_id=run.pk) and (run.max_steps is None or steps < run.max_steps):
        pending = online_pending(run=run)
        if pending:
            records = {
                str(record["trajectory_id"]): record
                for record in training_records(tenant=tenant, trajectory_ids=pending)
            }
            stale, empty = [], []
            for trajectory_id in pending:
                record = records.get(trajectory_id)
                sample_set = (
                    build_samples([record], current_version=version.number, eta=run.staleness_bound)
                    if record is not None
                    else None
                )
                if sample_set is not None and sample_set.samples:
                    waiting[trajectory_id] = list(sample_set.samples)
                elif sample_set is not None and sample_set.counts.stale_samples:
                    stale.append(trajectory_id)
                else:
                    empty.append(trajectory_id)
            online_run_take(run=run, waiting=[t for t in pending if t in waiting], stale=stale, empty=empty)
        if sum(len(samples) for samples in waiting.values()) < run.samples_per_step:
            time.sleep(poll_seconds)
            continue
        oldest = version.number - run.staleness_bound  # a publication since they arrived may have aged them
        stale = [t for t, samples in waiting.items() if not any(_fresh(sample, oldest) for sample in samples)]
        for trajectory_id in stale:
            del waiting[trajectory_id]
        batch: list = []
        trained: list[str] = []
        for trajectory_id in list(waiting):
            if len(batch) >= run.samples_per_step:
                break
            batch.extend(sample for sample in waiting.pop(trajectory_id) if _fresh(sample, oldest))
            trained.append(trajectory_id)
        if not batch:
            online_run_settle(run=run, step=steps, trained=[], stale=stale)
            continue
        metrics = trainer.step(batch, current_version=version.number)
        steps += 1
        online_run_settle(run=run, step=steps, trained=trained, stale=stale)
        published = None
        if steps % run.publish_every == 0:
            out = Path(settings.AREAL_MODELS_DIR) / run.model_name / f"online-{run.pk}" / f"step-{steps:05d}"
            trainer.export(out)
            published = model_version_register(
                tenant=tenant,
                actor=actor,
                name=run.model_name,
                checkpoint_path=str(out),
                tokenizer_hash=version.tokenizer_hash,
                parent=version,
                metrics={"online": {"run": run.pk, "step": steps, **_summary(metrics)}},
                description=f"online run {run.pk}, step {steps}",
            )
            if run.publish_to_backends:
                model_version_publish(tenant=tenant, actor=actor, version=published)
            version = published
        online_run_record_step(run_id=run.pk, version=published)
        metrics_publish(
            tenant_id=tenant.pk,
            stream=online_run_stream(run.pk),
            payload={"step": steps, "values": _summary(metrics)},
        )
    final = OnlineRun.objects.get(pk=run.pk)
    online_run_finish(run_id=run.pk, status=OnlineRunStatus.STOPPED)
    return {"run": run.pk, "status": "stopped", "steps": final.steps, "version": version.number}


def _fresh(sample, oldest: int) -> bool:
    """No generated token older than `oldest` (context tokens carry version -1)."""
    return all(
        version < 0 or version >= oldest
        for version, mask in zip(sample.versions, sample.loss_mask, strict=True)
        if mask
    )


def _record_id(record: dict) -> str:
    return str(record.get("trajectory_id") or record.get("id"))


def _summary(metrics) -> dict:
    values = metrics.to_dict()
    return {
        key: values[key]
        for key in ("loss", "reward_mean", "clip_fraction", "kl", "samples", "tokens")
        if key in values
    }
