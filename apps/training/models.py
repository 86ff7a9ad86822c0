from django.db import models
from django.utils import timezone

from apps.core.models import ImmutableModel, TenantOwned, TimestampedTenantOwned
from apps.training.choices import (  # noqa: F401 (re-exported)
    JOB_FINAL,
    Algorithm,
    JobStatus,
    OnlineRunStatus,
    VersionStatus,
)

# Which statuses a version may move to from each status.
VERSION_TRANSITIONS: dict[str, frozenset[str]] = {
    VersionStatus.TRAINING: frozenset({VersionStatus.CANDIDATE, VersionStatus.RETIRED}),
    VersionStatus.CANDIDATE: frozenset(
        {VersionStatus.CANARY, VersionStatus.PRODUCTION, VersionStatus.RETIRED}
    ),
    VersionStatus.CANARY: frozenset(
        {VersionStatus.PRODUCTION, VersionStatus.ROLLED_BACK, VersionStatus.CANDIDATE}
    ),
    VersionStatus.PRODUCTION: frozenset({VersionStatus.RETIRED, VersionStatus.ROLLED_BACK}),
    VersionStatus.RETIRED: frozenset({VersionStatus.PRODUCTION}),
    VersionStatus.ROLLED_BACK: frozenset({VersionStatus.RETIRED}),
}


class ModelVersion(TimestampedTenantOwned):
    """One policy version of a tenant's model: a checkpoint directory with its lineage. `name` is the
    model name agents ask for (the served model); `number` counts versions of that name from 0 (the
    base). Immutable once registered except for status and metrics."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="model_versions")
    name = models.CharField(max_length=200)
    number = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    checkpoint_path = models.CharField(
        max_length=500, help_text="Hugging Face model directory of the weights."
    )
    tokenizer_hash = models.CharField(max_length=64)
    dataset_snapshot = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"trajectory_ids": [...], "content_hash": "..."} it was trained on.',
    )
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.CANDIDATE)
    description = models.CharField(max_length=300, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    # A harness update (apps.evolution) is a version of its own: the parent's weights with another harness.
    harness = models.ForeignKey(
        "evolution.HarnessVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="model_versions",
    )
    weights_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="A harness-only version: the version whose weights (and backends) serve it.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name", "number"], name="model_version_unique_number")
        ]
        ordering = ["name", "-number"]

    def __str__(self) -> str:
        return f"{self.name} v{self.number}"

    @property
    def label(self) -> str:
        return f"{self.name}@{self.number}"


class ModelAlias(TenantOwned):
    """A movable name (`production`, `candidate`, ...) pointing at one version of a model; every move is
    kept in AliasMove."""

    name = models.CharField(max_length=200)
    alias = models.SlugField(max_length=40)
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="aliases")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name", "alias"], name="model_alias_unique")]

    def __str__(self) -> str:
        return f"{self.name}:{self.alias} → v{self.version.number}"


class AliasMove(ImmutableModel, TenantOwned):
    """Append-only history of alias moves: which version an alias named, from when."""

    name = models.CharField(max_length=200)
    alias = models.SlugField(max_length=40)
    from_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    to_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    actor = models.CharField(max_length=150)
    reason = models.CharField(max_length=300, blank=True)
    moved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["moved_at", "id"]
        indexes = [models.Index(fields=["tenant", "name", "alias", "moved_at"])]

    def __str__(self) -> str:
        return f"{self.name}:{self.alias} → {self.to_version_id} at {self.moved_at}"


# ---- training jobs ---------------------------------------------------------------------------------


# running → running is a resumption: a redelivered or requeued job claimed again by another worker.
JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.RUNNING: frozenset(
        {JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


class TrainingJob(TimestampedTenantOwned):
    """One training run from a base version over a frozen dataset snapshot to a new candidate version.
    `config` is a workers.engines.TrainConfig as JSON; `lease` fences the worker that holds the job."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="training_jobs")
    algorithm = models.CharField(max_length=20, choices=Algorithm.choices)
    base_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="training_jobs")
    produced_version = models.OneToOneField(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="produced_by_job"
    )
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    config = models.JSONField(default=dict)
    batch_size = models.PositiveIntegerField(default=16)
    total_steps = models.PositiveIntegerField(default=10)
    checkpoint_every = models.PositiveIntegerField(default=10)
    staleness_bound = models.PositiveIntegerField(null=True, blank=True, help_text="η; empty: no bound.")
    dataset_snapshot = models.JSONField(
        default=dict, help_text='{"trajectory_ids": [...], "content_hash", "filters"}'
    )
    sample_counts = models.JSONField(default=dict, blank=True)
    progress_step = models.PositiveIntegerField(default=0)
    eta_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    lease = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    description = models.CharField(max_length=300, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.algorithm}, {self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in JOB_FINAL

    @property
    def progress_percent(self) -> int:
        return int(100 * self.progress_step / max(self.total_steps, 1))


class TrainingMetric(TenantOwned):
    """One row per job step (upserted: a resumed job redoes the steps after its last checkpoint)."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="metric_rows")
    step = models.PositiveIntegerField()
    values = models.JSONField()
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="training_metric_unique_step")]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}"


class TrainingLogLine(TenantOwned):
    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="log_lines")
    level = models.CharField(max_length=10, default="info")
    message = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.message[:60]}"


class OnlineRun(TenantOwned):
    """An online decoupled-PPO run (AReaL's online mode): a long-running worker consumes the qualified training
    queue as it fills, trains one step per `samples_per_step` samples, registers a version every `publish_every`
    steps (and loads it onto the model's backends unless `publish_to_backends` is off), drops data staler than
    `staleness_bound` versions, and holds new RL sessions back (the gateway's 429) once more than
    `rollout_bound` steps' worth of them are out ahead of the learner (empty: `staleness_bound`)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="online_runs")
    model_name = models.CharField(max_length=200)
    base_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    current_version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=16, choices=OnlineRunStatus.choices, default=OnlineRunStatus.RUNNING)
    config = models.JSONField(default=dict)  # workers.engines.TrainConfig as JSON
    samples_per_step = models.PositiveIntegerField(default=16)
    publish_every = models.PositiveIntegerField(default=1)
    staleness_bound = models.PositiveIntegerField(default=1)
    # ρ, AReaL's bound at the rollout side: at most (ρ + steps + 1)·samples_per_step RL sessions since the run
    # began. Null: η. Apart from η where production lags the learner (publish_to_backends off): then η must
    # cover the lag a release adds, which would let traffic run far ahead of what the learner can train.
    rollout_bound = models.PositiveIntegerField(null=True, blank=True)
    # True: each published version is loaded onto the model's backends at once (the learner serves its newest
    # version). False: versions are only registered; releases (canary, approval) decide what serves.
    publish_to_backends = models.BooleanField(default=True)
    max_steps = models.PositiveIntegerField(null=True, blank=True)
    steps = models.PositiveIntegerField(default=0)
    consumed = models.PositiveIntegerField(default=0)  # trajectories trained on
    dropped_stale = models.PositiveIntegerField(default=0)  # trajectories dropped as older than η versions
    # samples holding generated tokens of unknown policy version (-1), which η cannot age; kept or dropped by
    # AREAL_TRAINING_UNKNOWN_VERSIONS (workers/rl/samples.py)
    unknown_version_samples = models.PositiveIntegerField(default=0)
    stop_requested = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"online run {self.pk} ({self.model_name}, {self.status})"


class OnlineConsumption(TenantOwned):
    """A trajectory an online run has taken from the queue, once: trained on, or dropped as stale."""

    run = models.ForeignKey(OnlineRun, on_delete=models.CASCADE, related_name="consumptions")
    trajectory_id = models.UUIDField()
    outcome = models.CharField(max_length=16)  # waiting / trained / stale / empty / uniform
    step = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "trajectory_id"], name="online_consumption_once")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.trajectory_id} {self.outcome}"
