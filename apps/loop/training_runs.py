"""The train queue's long runs, called by the thin tasks in apps/training/tasks.py: a training job
(`training_job_execute`, task training.run_job) and an online run (`online_run_execute`, task
training.run_online). Rows in, workers.engines / workers.rl dataclasses through, a model version out.

Services are looked up on the module at call time (`jobs.training_job_record_step`), so a test can stand
in for one and stop the worker at a chosen point."""

import logging
import os
import socket
import time
import traceback
from pathlib import Path

from django.conf import settings

from apps.audit.services import Actor
from apps.core.errors import Conflict, Forbidden, ValidationFailed
from apps.metrics.publish import metrics_publish
from apps.training import jobs, services
from apps.training.choices import JobStatus, OnlineRunStatus
from apps.training.online import (
    online_pending,
    online_run_finish,
    online_run_for_worker,
    online_run_heartbeat,
    online_run_record_step,
    online_run_settle,
    online_run_steps,
    online_run_stream,
    online_run_take,
    online_unsettled_groups,
)
from apps.training.selectors import (
    model_version_parents,
    training_job_stop_reason,
    training_records,
    training_snapshot_hash,
)
from workers.rl import staleness

logger = logging.getLogger(__name__)


# ---- training jobs -----------------------------------------------------------------------------------


def training_job_execute(*, job_id: int) -> dict:
    """Runs (or resumes) one training job. Claims it with a conditional update and a fresh lease (a job
    that is final, cancelled or held by nobody answers "skipped"), resumes from the newest checkpoint in
    the job's run directory, checks for cancel and for a lost lease between steps, persists and publishes
    each step's metrics, checkpoints every `checkpoint_every` steps, then exports a Hugging Face directory
    and registers it as a candidate version (jobs.training_job_succeed). An error fails the job with its
    traceback (the task does not retry)."""
    claim = jobs.training_job_claim(job_id=job_id, worker=f"{socket.gethostname()}:{os.getpid()}")
    if claim is None:
        return {"job": job_id, "status": "skipped"}
    job, lease = claim
    try:
        return _train(job, lease)
    except Exception:
        logger.exception("training job %s failed", job_id)
        jobs.training_job_finish(
            job_id=job_id, lease=lease, status=JobStatus.FAILED, error=traceback.format_exc()
        )
        return {"job": job_id, "status": "failed"}


def training_process_prepare() -> None:
    """The training worker's process before it trains: torch's intra-op threads (AREAL_TRAINING_THREADS) and
    its scheduling niceness (AREAL_TRAINING_NICENESS, 0 leaves it as it is). On a machine that also serves and
    evaluates (the demo, `manage.py up` on one host) a niced trainer takes the CPU the web process, the
    inference servers and an eval run leave, so a candidate's gate is not slowed by the next training step.
    Linux keeps a niceness per thread: every thread of the process is set, torch's pool included."""
    import torch

    niceness = settings.AREAL_TRAINING_NICENESS
    if niceness:
        threads = Path("/proc/self/task")
        for thread in [int(name.name) for name in threads.iterdir()] if threads.exists() else [0]:
            try:
                os.setpriority(os.PRIO_PROCESS, thread, niceness)
            except (ProcessLookupError, PermissionError):  # a thread that ended; lowering needs privilege
                continue
    torch.set_num_threads(settings.AREAL_TRAINING_THREADS)


def _train(job, lease: str) -> dict:
    from workers.engines import TrainConfig, Trainer, latest_checkpoint, plan_batches
    from workers.inference.modelgen import tokenizer_fingerprint
    from workers.rl.samples import build_samples

    training_process_prepare()
    tenant, base = job.tenant, job.base_version
    snapshot = job.dataset_snapshot
    if (
        training_snapshot_hash(tenant=tenant, trajectory_ids=snapshot["trajectory_ids"])
        != snapshot["content_hash"]
    ):
        raise ValidationFailed("the dataset changed since the job was created (content hash differs)")
    current_version = base.number
    config = TrainConfig.from_dict(job.config)
    sample_set = build_samples(
        training_records(tenant=tenant, trajectory_ids=snapshot["trajectory_ids"]),
        current_version=current_version,
        eta=job.staleness_bound,
        reward_discount=config.reward_discount,
        unknown_versions=settings.AREAL_TRAINING_UNKNOWN_VERSIONS,
    )
    counts = dict(vars(sample_set.counts).items())
    counts["staleness_histogram"] = [list(pair) for pair in sample_set.staleness_histogram]
    jobs.training_job_set_counts(job_id=job.pk, lease=lease, counts=counts)
    samples = sample_set.samples
    if not samples:
        raise ValidationFailed(f"no trainable sample in the snapshot: {counts}")

    run_dir = Path(settings.AREAL_TRAINING_DIR) / f"job-{job.pk}"
    resume = latest_checkpoint(run_dir / "checkpoints")
    if resume is not None:
        trainer = Trainer.resume(
            base.checkpoint_path, resume.path, config=config, device=settings.AREAL_TRAINING_DEVICE
        )
        jobs.training_job_log(job=job, message=f"resumed from the checkpoint after step {resume.step}")
    else:
        trainer = Trainer(base.checkpoint_path, config, device=settings.AREAL_TRAINING_DEVICE)
        jobs.training_job_log(
            job=job,
            message=f"started: {len(samples)} samples ({counts['stale_samples']} stale "
            f"dropped, η={job.staleness_bound}) on {trainer.device}",
        )
        if counts["unknown_version_samples"]:
            jobs.training_job_log(
                job=job, message=_warn_unknown_versions(f"job {job.pk}", counts["unknown_version_samples"])
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
            jobs.training_job_finish(job_id=job.pk, lease=lease, status=JobStatus.CANCELLED)
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
        reason = jobs.training_job_record_step(job_id=job.pk, lease=lease, step=done, values=last.to_dict())
        if reason == "lost":
            return {"job": job.pk, "status": "lost", "step": done}
        if reason == "cancel" and done < job.total_steps:
            jobs.training_job_finish(job_id=job.pk, lease=lease, status=JobStatus.CANCELLED)
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
    version = jobs.training_job_succeed(
        job_id=job.pk,
        lease=lease,
        checkpoint_path=str(export_dir),
        tokenizer_hash=base.tokenizer_hash,
        metrics={"training": summary},
    )
    if version is None:
        return {"job": job.pk, "status": "lost"}
    return {"job": job.pk, "status": "succeeded", "version": version.pk, "number": version.number}


# ---- online runs -------------------------------------------------------------------------------------


def online_run_execute(*, run_id: int, poll_seconds: float = 0.5) -> dict:
    """Runs an OnlineRun until it is stopped or reaches max_steps. Each round: take the qualified
    trajectories the run has not consumed (apps.training.online.online_pending), build samples under the
    staleness bound η against the run's current version V (samples holding a token older than V − η are
    dropped and counted), and once `samples_per_step` samples are waiting, train one decoupled-PPO step on
    them; every `publish_every` steps export the weights, register them as the next version (parent: the
    previous one) and, unless the run leaves serving to releases (`publish_to_backends` off), publish them
    to the model's backends, which then stamp V + 1 on new tokens. A run that is not running answers
    "skipped"; an error fails the run with its traceback."""
    run = online_run_for_worker(run_id=run_id)
    if run is None or run.status != OnlineRunStatus.RUNNING:
        return {"run": run_id, "status": "skipped"}
    try:
        return _learn(run, poll_seconds)
    except Exception:
        logger.exception("online run %s failed", run_id)
        online_run_finish(run_id=run_id, status=OnlineRunStatus.FAILED, error=traceback.format_exc())
        return {"run": run_id, "status": "failed"}


def _learn(run, poll_seconds: float) -> dict:
    from workers.engines import TrainConfig, Trainer

    training_process_prepare()
    tenant = run.tenant
    actor = Actor.system(f"online-run-{run.pk}")
    config = TrainConfig.from_dict(run.config)
    version = run.current_version
    trainer = Trainer(version.checkpoint_path, config, device=settings.AREAL_TRAINING_DEVICE)
    waiting: tuple[staleness.Waiting, ...] = ()  # queued trajectories' samples, oldest first, until a step
    # lag counted along the parent chain (workers.rl.staleness.Lineage)
    lineage = _lineage(run, version.number)
    lags: dict[int, int] = {}  # trained samples by lag since the last publication (its version's metrics)
    steps = run.steps
    while online_run_heartbeat(run_id=run.pk) and (run.max_steps is None or steps < run.max_steps):
        pending = online_pending(run=run)
        if pending:
            records = {
                str(record["trajectory_id"]): record
                for record in training_records(tenant=tenant, trajectory_ids=pending)
            }
            intake = staleness.classify(
                pending,
                records,
                current_version=version.number,
                eta=run.staleness_bound,
                reward_discount=config.reward_discount,
                unknown_versions=settings.AREAL_TRAINING_UNKNOWN_VERSIONS,
                lineage=lineage,
            )
            waiting += intake.waiting
            online_run_take(
                run=run,
                waiting=[item.trajectory_id for item in intake.waiting],
                stale=list(intake.stale),
                empty=list(intake.empty),
                unknown_version_samples=intake.unknown_version_samples,
            )
            _warn_unknown_versions(f"online run {run.pk}", intake.unknown_version_samples)
        unsettled = None  # whole groups: the waiting groups with a session still undecided
        if config.whole_groups:
            unsettled = online_unsettled_groups(
                run=run, group_ids={staleness.group_of(item) for item in waiting} - {""}
            )
            if config.skip_uniform_groups:
                uniform = set(staleness.uniform_groups(waiting, unsettled=unsettled))
                if uniform:
                    waiting = tuple(item for item in waiting if item.trajectory_id not in uniform)
                    online_run_settle(run=run, step=steps, trained=[], stale=[], uniform=sorted(uniform))
        if not staleness.is_ready(waiting, samples_per_step=run.samples_per_step, unsettled=unsettled):
            time.sleep(poll_seconds)
            continue
        batch = staleness.take_batch(
            waiting,
            current_version=version.number,
            eta=run.staleness_bound,
            samples_per_step=run.samples_per_step,
            lineage=lineage,
            max_samples=DUE_SAMPLES_PER_STEP * run.samples_per_step,
            unsettled=unsettled,
        )
        waiting = batch.waiting
        if not batch.samples:
            online_run_settle(run=run, step=steps, trained=[], stale=list(batch.stale))
            continue
        metrics = trainer.step(list(batch.samples), current_version=version.number)
        for lag, count in staleness.lag_histogram(batch.samples, staleness.Lineage(version.number)).items():
            lags[lag] = lags.get(lag, 0) + count  # the batch is relabelled V − lag: numbers give the lags
        steps += 1
        online_run_settle(run=run, step=steps, trained=list(batch.trained), stale=list(batch.stale))
        published = None
        if steps % run.publish_every == 0:
            out = Path(settings.AREAL_MODELS_DIR) / run.model_name / f"online-{run.pk}" / f"step-{steps:05d}"
            trainer.export(out)
            published = services.model_version_register(
                tenant=tenant,
                actor=actor,
                name=run.model_name,
                checkpoint_path=str(out),
                tokenizer_hash=version.tokenizer_hash,
                parent=version,
                metrics={
                    "online": {
                        "run": run.pk,
                        "step": steps,
                        **_summary(metrics),
                        "staleness": {str(lag): count for lag, count in sorted(lags.items())},
                    }
                },
                description=f"online run {run.pk}, step {steps}",
            )
            if run.publish_to_backends:
                _publish_and_serve(run=run, actor=actor, version=published, step=steps)
            version = published
            lineage = lineage.advanced(published.number)
            lags = {}
        online_run_record_step(run_id=run.pk, version=published)
        metrics_publish(
            tenant_id=tenant.pk,
            stream=online_run_stream(run.pk),
            payload={"step": steps, "values": _summary(metrics)},
        )
    final_steps = online_run_steps(run_id=run.pk)
    online_run_finish(run_id=run.pk, status=OnlineRunStatus.STOPPED)
    return {"run": run.pk, "status": "stopped", "steps": final_steps, "version": version.number}


# A step takes the trajectories it would age past η, up to this many batches' samples.
DUE_SAMPLES_PER_STEP = 2


def _lineage(run, current: int) -> staleness.Lineage:
    """The run's model's versions as a tree (number → parent's number), current: version `current`."""
    return staleness.Lineage(
        current=current, parents=model_version_parents(tenant=run.tenant, name=run.model_name)
    )


def _warn_unknown_versions(who: str, samples: int) -> str:
    """Logs (as a warning) how many samples held generated tokens of unknown policy version and what was done
    with them; returns the message ("" when there were none)."""
    if not samples:
        return ""
    kept = settings.AREAL_TRAINING_UNKNOWN_VERSIONS == "keep"
    message = (
        f"{who}: {samples} sample(s) hold generated tokens of unknown policy version (-1: the backend reported "
        "none and the gateway could derive none, see the steps' state.token_versions); "
        + (
            "kept: the staleness bound cannot age them and the log-linear proximal treats them as on-policy"
            if kept
            else "dropped (AREAL_TRAINING_UNKNOWN_VERSIONS=drop)"
        )
    )
    logger.warning(message)
    return message


def _publish_and_serve(*, run, actor, version, step: int) -> None:
    """AReaL's online mode: the run's new version loaded into the model's backends and, once loaded, serving
    (production, alias, routing and the serving history: apps.releases.serving). During a release of the model
    the release decides what serves: the version stays registered only, and the log says so."""
    from apps.releases.serving import version_publish_directly

    try:
        version_publish_directly(
            tenant=run.tenant, actor=actor, version=version, reason=f"online run {run.pk}, step {step}"
        )
    except (Conflict, Forbidden) as refusal:  # a release under way; the two-person rule turned on meanwhile
        logger.warning("online run %s: %s registered but not published: %s", run.pk, version, refusal.message)


def _summary(metrics) -> dict:
    values = metrics.to_dict()
    return {
        key: values[key]
        for key in ("loss", "reward_mean", "clip_fraction", "kl", "samples", "tokens", "skipped_samples")
        if key in values
    }
