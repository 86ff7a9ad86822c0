import hashlib
import json
from uuid import UUID

from django.db.models import Count, Max, Q

from apps.core.selectors import get_in_tenant
from apps.qualification.selectors import content_hashes, qualified_content_hashes
from apps.rewards.selectors import training_rewards
from apps.tenants.models import Tenant
from apps.training.models import (
    AliasMove,
    JobStatus,
    ModelAlias,
    ModelVersion,
    TrainingJob,
    TrainingLogLine,
    TrainingMetric,
)
from apps.trajectories.selectors import trajectories_by_id, trajectory_with_records
from apps.trajectories.serialize import trajectory_to_atdp


def model_version_list(*, tenant: Tenant, name: str | None = None, status: str | None = None):
    versions = ModelVersion.objects.for_tenant(tenant).select_related("parent")
    if name:
        versions = versions.filter(name=name)
    if status:
        versions = versions.filter(status=status)
    return versions.order_by("name", "-number")


def model_names(*, tenant: Tenant) -> list[str]:
    """The names of this tenant's models, alphabetically."""
    return list(
        ModelVersion.objects.for_tenant(tenant).order_by("name").values_list("name", flat=True).distinct()
    )


def model_version_get(*, tenant: Tenant, version_id) -> ModelVersion:
    return get_in_tenant(
        ModelVersion.objects.select_related("parent"),
        tenant=tenant,
        pk=version_id,
        code="model_version_not_found",
    )


def model_version_parents(*, tenant: Tenant, name: str) -> dict[int, int | None]:
    """{number: its parent's number (None for a root)} of every version of the tenant's model `name`."""
    return dict(ModelVersion.objects.filter(tenant=tenant, name=name).values_list("number", "parent__number"))


def model_versions_served_differently(*, tenant_id: int, name: str):
    """The tenant's versions of `name` with a harness or another version's weights (`weights_of`), those two
    loaded: what the gateway serves otherwise than by number (apps.evolution.harness_versions)."""
    return (
        ModelVersion.objects.filter(tenant_id=tenant_id, name=name)
        .filter(Q(harness__isnull=False) | Q(weights_of__isnull=False))
        .select_related("harness", "weights_of")
    )


def model_version_highest_number(*, tenant_id: int, name: str) -> int | None:
    """The highest version number of the tenant's model `name`; None before its first version."""
    return ModelVersion.objects.filter(tenant_id=tenant_id, name=name).aggregate(top=Max("number"))["top"]


def model_version_by_number(*, tenant: Tenant, name: str, number: int) -> ModelVersion:
    return get_in_tenant(
        ModelVersion,
        tenant=tenant,
        name=name,
        number=number,
        code="model_version_not_found",
        message=f"no version {number} of {name!r} in this tenant",
    )


def alias_resolve(*, tenant: Tenant, name: str, alias: str) -> ModelVersion | None:
    row = ModelAlias.objects.filter(tenant=tenant, name=name, alias=alias).select_related("version").first()
    return row.version if row else None


def alias_list(*, tenant: Tenant, name: str | None = None):
    rows = ModelAlias.objects.filter(tenant=tenant).select_related("version")
    return rows.filter(name=name) if name else rows


def alias_history(*, tenant: Tenant, name: str | None = None, alias: str | None = None, since=None):
    """The tenant's alias moves, oldest first (of one model `name`, one `alias`, from `since` when given)."""
    moves = AliasMove.objects.filter(tenant=tenant).select_related("from_version", "to_version")
    if name:
        moves = moves.filter(name=name)
    if alias:
        moves = moves.filter(alias=alias)
    if since is not None:
        moves = moves.filter(moved_at__gte=since)
    return moves.order_by("moved_at", "id")


def alias_at(*, tenant: Tenant, name: str, alias: str, moment) -> ModelVersion | None:
    """The version `name:alias` named at `moment` (None before its first move)."""
    move = (
        alias_history(tenant=tenant, name=name, alias=alias)
        .filter(moved_at__lte=moment)
        .order_by("-moved_at", "-id")
        .first()
    )
    return move.to_version if move else None


def model_lineage(*, tenant: Tenant, name: str) -> list[dict]:
    """Every version of `name` with its parent number, oldest first: the tree a lineage page draws."""
    return [
        {
            "id": version.pk,
            "number": version.number,
            "parent": version.parent.number if version.parent else None,
            "status": version.status,
            "created_at": version.created_at,
            "metrics": version.metrics,
        }
        for version in model_version_list(tenant=tenant, name=name).order_by("number")
    ]


# ---- training jobs ---------------------------------------------------------------------------------


def training_queue_snapshot(
    *, tenant: Tenant, agent: str | None = None, task_id: str | None = None, limit: int | None = None
) -> dict:
    """The qualified training queue now, frozen: trajectory ids (oldest first) and a sha256 over their
    (id, content hash) pairs, so a job trains on exactly what it was created with."""
    pairs = qualified_content_hashes(tenant=tenant, agent=agent, task_id=task_id, limit=limit)
    return {
        "trajectory_ids": [trajectory_id for trajectory_id, _ in pairs],
        "content_hash": _snapshot_hash(pairs),
        "filters": {"agent": agent, "task_id": task_id, "limit": limit},
    }


def training_snapshot_hash(*, tenant: Tenant, trajectory_ids) -> str:
    """The content hash the snapshot's trajectories have now (compare with the one frozen at creation)."""
    digests = content_hashes(tenant=tenant, trajectory_ids=trajectory_ids)
    return _snapshot_hash([(str(t), digests.get(UUID(str(t)), "")) for t in trajectory_ids])


def _snapshot_hash(pairs) -> str:
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def training_records(*, tenant: Tenant, trajectory_ids) -> list[dict]:
    """ATDP records of the snapshot's trajectories (in snapshot order) whose reward list is the single
    training reward apps.rewards computes (the combination rule of the agent's spec), and whose
    `step_rewards` ({"steps": {step id: its own reward}, "outcome": the trajectory-level rewards combined})
    keeps the rewards of single steps, ready for workers.rl.samples (a step with its own reward trains with
    it). A trajectory deleted since the snapshot is left out."""
    trajectories = trajectory_with_records(
        trajectories_by_id(tenant=tenant, trajectory_ids=trajectory_ids).select_related("tenant"),
        tenant=tenant,
    )
    by_id = {str(t.pk): t for t in trajectories}
    records = []
    for trajectory_id in trajectory_ids:
        trajectory = by_id.get(str(trajectory_id))
        if trajectory is None:
            continue
        record = trajectory_to_atdp(trajectory, trajectory.steps.all(), [])
        rewards = training_rewards(tenant=tenant, trajectory=trajectory)
        value = rewards.trajectory
        record["rewards"] = [] if value is None else [{"target": "trajectory", "value": value}]
        record["step_rewards"] = {"steps": dict(rewards.steps), "outcome": rewards.outcome}
        records.append(record)
    return records


def training_job_list(*, tenant: Tenant, status: str | None = None):
    jobs = TrainingJob.objects.for_tenant(tenant).select_related("base_version", "produced_version")
    return jobs.filter(status=status) if status else jobs


def training_job_get(*, tenant: Tenant, job_id) -> TrainingJob:
    return get_in_tenant(
        TrainingJob.objects.select_related("base_version", "produced_version"),
        tenant=tenant,
        pk=job_id,
        code="training_job_not_found",
    )


def training_job_metrics(*, tenant: Tenant, job_id) -> list[dict]:
    return [
        {"step": step, **values}
        for step, values in TrainingMetric.objects.filter(tenant=tenant, job_id=job_id)
        .order_by("step")
        .values_list("step", "values")
    ]


def training_job_logs(*, tenant: Tenant, job_id, limit: int = 500):
    return list(TrainingLogLine.objects.filter(tenant=tenant, job_id=job_id).order_by("-at", "-id")[:limit])[
        ::-1
    ]


def training_job_for_worker(*, job_id) -> TrainingJob:
    """The job row a training worker runs (the worker holds the lease; no tenant in hand yet)."""
    return TrainingJob.objects.select_related("tenant", "base_version").get(pk=job_id)


def training_job_stop_reason(*, job_id, lease: str) -> str | None:
    """ "cancel" when a cancel was requested, "lost" when another worker holds the job, else None."""
    row = TrainingJob.objects.filter(pk=job_id).values("lease", "status", "cancel_requested").first()
    if row is None or row["lease"] != lease or row["status"] != JobStatus.RUNNING:
        return "lost"
    return "cancel" if row["cancel_requested"] else None


def dangerously_training_job_counts() -> dict[tuple[str, str], int]:
    """(tenant slug, status) → number of training jobs, over every tenant (the Prometheus endpoint only)."""
    rows = TrainingJob.objects.values("tenant__slug", "status").annotate(count=Count("id")).order_by()
    return {(row["tenant__slug"], row["status"]): row["count"] for row in rows}


def training_trajectory_ids_in_use(*, tenant: Tenant) -> set[UUID]:
    """Trajectory ids in the dataset snapshot of the tenant's unfinished (queued or running) training jobs:
    a job checks its snapshot's content hash when it starts or resumes, so retention holds these until the
    job ends. Finished jobs and versions keep only ids and a hash as lineage; they hold nothing."""
    snapshots = (
        TrainingJob.objects.for_tenant(tenant)
        .filter(status__in=(JobStatus.QUEUED, JobStatus.RUNNING))
        .values_list("dataset_snapshot", flat=True)
    )
    return {
        UUID(str(trajectory_id))
        for snapshot in snapshots
        for trajectory_id in (snapshot or {}).get("trajectory_ids", [])
    }
