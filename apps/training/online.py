"""Online mode: services and selectors of OnlineRun (AReaL's online decoupled PPO over the live queue).

The loop itself is runners.online_run_execute (its batching: workers.rl.staleness); this module owns its
rows. A token sampled by version v is stale once the run's current version V is more than η training steps
past v along the lineage of versions (workers.rl.staleness.Lineage; not the difference of version numbers).

Back-pressure (AReaL's StalenessManager): with B = samples_per_step and v = steps trained, at most
(ρ + v + 1)·B rollouts may have been started since the run began; capacity = that − (accepted + running),
where accepted = sessions that ended and running = sessions still open. The gateway refuses
/rl/start_session with 429 while the capacity of the tenant's running online run is ≤ 0. ρ (rollout_bound)
is η unless the run sets it apart: AReaL's rollouts are made by the learner's newest weights, so bounding
them at η bounds the staleness of what is trained. A run whose versions serve only once released
(publish_to_backends off) gets its data from production, which lags the learner by whatever a release
takes: its η must cover that lag (decoupled PPO corrects for it), while ρ keeps the traffic it takes at the
pace the learner trains, so that what arrives is trained on rather than left waiting or aged past η.
"""

from collections.abc import Sequence

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.core.selectors import get_in_tenant
from apps.core.tasking import task_enqueue_on_commit
from apps.metrics.publish import metrics_publish
from apps.qualification.choices import QualificationStatus
from apps.qualification.selectors import qualified_trajectory_ids
from apps.training.job_words import online_run_title
from apps.training.jobs import JOBS_STREAM
from apps.training.models import ModelVersion, OnlineConsumption, OnlineRun, OnlineRunStatus, VersionStatus
from apps.trajectories.selectors import rl_sessions_since, trajectories_since


@transaction.atomic
def online_run_start(
    *,
    tenant,
    actor: Actor,
    base_version: ModelVersion,
    hyperparameters: dict | None = None,
    samples_per_step: int = 16,
    publish_every: int = 1,
    staleness_bound: int = 1,
    rollout_bound: int | None = None,
    max_steps: int | None = None,
    publish_to_backends: bool = True,
) -> OnlineRun:
    """Creates the tenant's online run for `base_version.name` (one running run per tenant, else 409) and
    enqueues `training.run_online` on the train queue on commit. With `publish_to_backends` off the run only
    registers its versions, and releases decide what serves (its data then comes from the released versions,
    so η must cover how far production lags behind the learner, and `rollout_bound` ρ, when given, paces
    the sessions it takes apart from η). Audited."""
    from workers.engines import TrainConfig

    if base_version.tenant_id != tenant.pk:
        raise ValidationFailed("the base version must be this tenant's")
    if samples_per_step < 1 or publish_every < 1:
        raise ValidationFailed(
            "samples_per_step and publish_every must be >= 1",
            fields={
                name: ["must be >= 1"]
                for name, value in (("samples_per_step", samples_per_step), ("publish_every", publish_every))
                if value < 1
            },
        )
    for name, bound in (("staleness_bound", staleness_bound), ("rollout_bound", rollout_bound)):
        if bound is not None and bound < 0:
            raise ValidationFailed(f"{name} must be >= 0", fields={name: ["must be >= 0"]})
    if publish_to_backends:  # each version it trains would serve production at once, on one person's word
        from apps.tenants.selectors import two_person_rule_refuse

        two_person_rule_refuse(
            tenant=tenant,
            change="an online run that publishes its versions to the backends (publish_to_backends)",
        )
    if base_version.status == VersionStatus.TRAINING:
        raise Conflict(
            f"{base_version} is still training; learn from a finished version", code="version_training"
        )
    running = OnlineRun.objects.filter(tenant=tenant, status=OnlineRunStatus.RUNNING).first()
    if running is not None:
        raise Conflict(
            f"this tenant already has a running online run ({online_run_title(running)}); stop it first",
            code="online_run_exists",
        )
    values = {"algorithm": "decoupled_ppo", "total_steps": max_steps or 1000, **(hyperparameters or {})}
    try:
        config = TrainConfig.from_dict(values).to_dict()
    except (TypeError, ValueError) as error:
        raise ValidationFailed(
            f"invalid hyperparameters: {error}",
            fields={"hyperparameters": [str(error)]},
            code="invalid_hyperparameters",
        ) from None
    run = OnlineRun.objects.create(
        tenant=tenant,
        model_name=base_version.name,
        base_version=base_version,
        current_version=base_version,
        config=config,
        samples_per_step=samples_per_step,
        publish_every=publish_every,
        staleness_bound=staleness_bound,
        rollout_bound=rollout_bound,
        max_steps=max_steps,
        publish_to_backends=publish_to_backends,
        created_by=actor.label,
        heartbeat_at=timezone.now(),
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="online_run.start",
        target=run,
        data={
            "base": base_version.number,
            "samples_per_step": samples_per_step,
            "publish_every": publish_every,
            "eta": staleness_bound,
            "rho": rollout_bound,
            "publish_to_backends": publish_to_backends,
        },
    )
    task_enqueue_on_commit("training.run_online", run.pk)
    metrics_publish(
        tenant_id=tenant.pk, stream=JOBS_STREAM, payload={"online_run": run.pk, "status": "running"}
    )
    return run


@transaction.atomic
def online_run_stop(*, tenant, actor: Actor, run_id: int) -> OnlineRun:
    """Asks the run to stop after its current step (a run that is not running is returned as it is). Audited.
    Another tenant's run is a NotFound, like a missing one."""
    run = get_in_tenant(
        OnlineRun.objects.select_for_update(), tenant=tenant, pk=run_id, code="online_run_not_found"
    )
    if run.status == OnlineRunStatus.RUNNING and not run.stop_requested:
        run.stop_requested = True
        run.save(update_fields=["stop_requested"])
        audit_record(tenant=tenant, actor=actor, verb="online_run.stop", target=run, data={})
    return run


def online_run_finish(*, run_id: int, status: str, error: str = "") -> None:
    OnlineRun.objects.filter(pk=run_id, status=OnlineRunStatus.RUNNING).update(
        status=status, error=error, finished_at=timezone.now()
    )


def online_run_heartbeat(*, run_id: int) -> bool:
    """Refreshes the heartbeat; False when the run should stop (stop requested or no longer running)."""
    OnlineRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())
    row = OnlineRun.objects.filter(pk=run_id).values("status", "stop_requested").first()
    return row is not None and row["status"] == OnlineRunStatus.RUNNING and not row["stop_requested"]


@transaction.atomic
def online_run_take(
    *,
    run: OnlineRun,
    waiting: list[str],
    stale: list[str],
    empty: list[str],
    unknown_version_samples: int = 0,
) -> None:
    """Records trajectories taken from the queue, once per (run, trajectory): `waiting` for a step, `stale`
    (older than η versions: dropped and counted) or `empty` (nothing trainable); counts their samples that
    hold generated tokens of unknown policy version (kept or dropped, AREAL_TRAINING_UNKNOWN_VERSIONS)."""
    now = timezone.now()
    rows = [
        OnlineConsumption(
            tenant_id=run.tenant_id,
            run=run,
            trajectory_id=trajectory_id,
            outcome=outcome,
            step=run.steps,
            at=now,
        )
        for outcome, ids in (("waiting", waiting), ("stale", stale), ("empty", empty))
        for trajectory_id in ids
    ]
    OnlineConsumption.objects.bulk_create(rows, ignore_conflicts=True)
    counters = {}
    if stale:
        counters["dropped_stale"] = F("dropped_stale") + len(stale)
    if unknown_version_samples:
        counters["unknown_version_samples"] = F("unknown_version_samples") + unknown_version_samples
    if counters:
        OnlineRun.objects.filter(pk=run.pk).update(**counters)


@transaction.atomic
def online_run_settle(
    *, run: OnlineRun, step: int, trained: list[str], stale: list[str], uniform: Sequence[str] = ()
) -> None:
    """Waiting trajectories a step trained on, dropped because a publication aged them past η (counted), or
    consumed untrained as members of a uniform group (settled, every reward alike: no gradient)."""
    for outcome, ids in (("trained", trained), ("stale", stale), ("uniform", uniform)):
        if ids:
            OnlineConsumption.objects.filter(run=run, trajectory_id__in=ids, outcome="waiting").update(
                outcome=outcome, step=step
            )
    OnlineRun.objects.filter(pk=run.pk).update(
        consumed=F("consumed") + len(trained), dropped_stale=F("dropped_stale") + len(stale)
    )


def online_run_record_step(*, run_id: int, version: ModelVersion | None = None) -> None:
    """One more step trained; with `version`, the run now serves that published version."""
    changes = {"steps": F("steps") + 1, "heartbeat_at": timezone.now()}
    if version is not None:
        changes["current_version"] = version
    OnlineRun.objects.filter(pk=run_id).update(**changes)


# ---- selectors ---------------------------------------------------------------------------------------


def online_run_active(*, tenant) -> OnlineRun | None:
    return (
        OnlineRun.objects.filter(tenant=tenant, status=OnlineRunStatus.RUNNING)
        .select_related("current_version", "base_version")
        .first()
    )


def online_run_stream(run_id: int) -> str:
    """The live stream of a run's steps ({"step", "values"}); its start is announced on JOBS_STREAM."""
    return f"training.online-{run_id}"


def online_run_losses(*, tenant, run_id: int) -> list[dict]:
    """[{"step", "loss"}] of the versions the run registered (one every `publish_every` steps), by step."""
    rows = ModelVersion.objects.filter(tenant=tenant, metrics__online__run=run_id).values_list(
        "metrics", flat=True
    )
    points = [
        {"step": metrics["online"].get("step"), "loss": metrics["online"].get("loss")} for metrics in rows
    ]
    return sorted((point for point in points if point["step"] is not None), key=lambda point: point["step"])


def online_run_list(*, tenant):
    """The tenant's online runs, newest first."""
    return OnlineRun.objects.filter(tenant=tenant).select_related("current_version", "base_version")


def online_run_get(*, tenant, run_id) -> OnlineRun:
    return get_in_tenant(
        OnlineRun.objects.select_related("current_version", "base_version"),
        tenant=tenant,
        pk=run_id,
        code="online_run_not_found",
    )


def online_run_for_worker(*, run_id) -> OnlineRun | None:
    """The run a train worker executes, with its tenant and versions (no tenant in hand yet); None when it is
    missing."""
    return (
        OnlineRun.objects.select_related("tenant", "current_version", "base_version")
        .filter(pk=run_id)
        .first()
    )


def online_run_steps(*, run_id) -> int:
    """The steps the run has trained, read afresh (OnlineRun.DoesNotExist for a missing one)."""
    return OnlineRun.objects.values_list("steps", flat=True).get(pk=run_id)


def online_runs_running(*, tenant, run_ids) -> bool:
    """Whether any of the tenant's online runs `run_ids` is still running."""
    return OnlineRun.objects.filter(tenant=tenant, pk__in=run_ids, status=OnlineRunStatus.RUNNING).exists()


def online_run_periods(*, tenant, model: str, since) -> list[tuple]:
    """(started_at, finished_at: None while running) of the tenant's online runs of `model` started at or after
    `since`: the compute an evolution policy has used."""
    return list(
        OnlineRun.objects.filter(tenant=tenant, model_name=model, started_at__gte=since).values_list(
            "started_at", "finished_at"
        )
    )


def online_pending(*, run: OnlineRun, limit: int = 256) -> list[str]:
    """Qualified trajectories of this run's window (started since the run began, production traffic) that the
    run has not consumed yet, oldest first."""
    taken = OnlineConsumption.objects.filter(run=run).values("trajectory_id")
    rows = qualified_trajectory_ids(
        tenant_id=run.tenant_id, started_since=run.started_at, excluding=taken, limit=limit
    )
    return [str(trajectory_id) for trajectory_id in rows]


# Outcomes of trajectories a run took and will never train on: their sessions leave the rollout bound's count.
UNUSABLE_OUTCOMES = ("stale", "empty", "uniform")


def online_unsettled_groups(*, run: OnlineRun, group_ids) -> set[str]:
    """Of `group_ids`, the GRPO groups not yet settled for this run: some trajectory of theirs started since
    the run began (aborted ones left out) is still undecided (open, or not yet qualified or disqualified).
    A run with TrainConfig.whole_groups takes a group only once it is settled (workers.rl.staleness)."""
    if not group_ids:
        return set()
    undecided = (
        trajectories_since(tenant_id=run.tenant_id, since=run.started_at)
        .filter(group_id__in=list(group_ids))
        .exclude(qualification__status__in=(QualificationStatus.QUALIFIED, QualificationStatus.DISQUALIFIED))
    )
    return set(undecided.values_list("group_id", flat=True).distinct())


def online_capacity(*, tenant_id) -> tuple[int, OnlineRun] | None:
    """(capacity, run) for the tenant's running online run, None without one. capacity =
    (ρ + v + 1)·B − (accepted + running), ρ the run's rollout_bound (else its η), over the RL sessions started since the run began, where a session
    stops counting once it can never be trained on (disqualified, or taken by the run as stale, empty or uniform), as
    AReaL counts only accepted rollouts: otherwise rejected sessions would use the budget up for good."""
    run = OnlineRun.objects.filter(tenant_id=tenant_id, status=OnlineRunStatus.RUNNING).first()
    if run is None:
        return None
    sessions = rl_sessions_since(tenant_id=tenant_id, since=run.started_at)
    unusable = OnlineConsumption.objects.filter(run=run, outcome__in=UNUSABLE_OUTCOMES).values(
        "trajectory_id"
    )
    counted = sessions.exclude(qualification__status="disqualified").exclude(pk__in=unusable).count()
    lead = run.staleness_bound if run.rollout_bound is None else run.rollout_bound
    budget = (lead + run.steps + 1) * run.samples_per_step
    return budget - counted, run
