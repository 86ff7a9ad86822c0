from django.db import models
from django.utils import timezone

from apps.core.models import ImmutableModel, TenantOwned, TimestampedTenantOwned
from apps.releases.choices import (  # noqa: F401 (re-exported)
    ACTIVE_STATUSES,
    SERVING_STATUSES,
    ReleaseStatus,
)

# The only moves a release may make. canary → canary is the move to the next stage.
RELEASE_TRANSITIONS: dict[str, frozenset[str]] = {
    ReleaseStatus.DRAFT: frozenset({ReleaseStatus.EVALUATING, ReleaseStatus.ABORTED}),
    ReleaseStatus.EVALUATING: frozenset(
        {ReleaseStatus.CANARY, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}
    ),
    ReleaseStatus.CANARY: frozenset(
        {
            ReleaseStatus.CANARY,
            ReleaseStatus.PAUSED,
            ReleaseStatus.AWAITING_APPROVAL,
            ReleaseStatus.ROLLED_BACK,
            ReleaseStatus.ABORTED,
        }
    ),
    ReleaseStatus.PAUSED: frozenset({ReleaseStatus.CANARY, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}),
    ReleaseStatus.AWAITING_APPROVAL: frozenset(
        {ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED}
    ),
    ReleaseStatus.PROMOTED: frozenset(),
    ReleaseStatus.ROLLED_BACK: frozenset(),
    ReleaseStatus.ABORTED: frozenset(),
}


class Release(TimestampedTenantOwned):
    """Moving a tenant's model from `baseline` to `candidate`: offline evaluation, then canary stages of
    sessions under guardrail analysis, then an operator's approval. Model versions are tenant-owned, so a
    release's tenant scope is its tenant."""

    model = models.CharField(max_length=200)
    candidate = models.ForeignKey("training.ModelVersion", on_delete=models.PROTECT, related_name="+")
    baseline = models.ForeignKey("training.ModelVersion", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=24, choices=ReleaseStatus.choices, default=ReleaseStatus.DRAFT)
    status_reason = models.CharField(max_length=500, blank=True)
    stages = models.JSONField(
        default=list, help_text="Percent of new sessions per stage, rising, e.g. [5, 25, 50, 100]."
    )
    stage_index = models.IntegerField(default=-1)
    stage_min_seconds = models.PositiveIntegerField(default=0)
    guardrails = models.JSONField(
        default=list, help_text='[{"metric", "direction", "threshold", "min_samples", "judge"}]'
    )
    failure_limit = models.PositiveIntegerField(default=0)
    inconclusive_limit = models.PositiveIntegerField(default=3)
    eval_suites = models.ManyToManyField("evaluation.EvalSuite", blank=True, related_name="+")
    eval_runs = models.JSONField(
        default=dict, blank=True, help_text='{"candidate": {suite_id: run_id}, "baseline": ...}'
    )
    consecutive_failures = models.PositiveIntegerField(default=0)
    consecutive_inconclusive = models.PositiveIntegerField(default=0)
    last_verdict = models.CharField(max_length=16, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    started_by_kind = models.CharField(max_length=16, blank=True)
    started_by_id = models.CharField(max_length=64, blank=True)
    started_by = models.CharField(max_length=150, blank=True)
    approved_by = models.CharField(max_length=150, blank=True)
    approvals = models.JSONField(
        default=list,
        blank=True,
        help_text='[{"actor", "kind", "id", "person", "at"}]: who approved the promotion (under the two-person '
        "rule a release no person started takes two people)",
    )
    canary_started_at = models.DateTimeField(null=True, blank=True)
    stage_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"release {self.pk}: {self.model} v{self.candidate_id} over v{self.baseline_id}"

    @property
    def stage_percent(self) -> float:
        if 0 <= self.stage_index < len(self.stages):
            return float(self.stages[self.stage_index])
        return 0.0


class ReleaseEvent(ImmutableModel, TenantOwned):
    """Every status move of a release, with who made it and why."""

    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=24)
    to_status = models.CharField(max_length=24)
    stage_index = models.IntegerField(default=-1)
    actor = models.CharField(max_length=150)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.release_id}: {self.from_status} → {self.to_status}"


class AnalysisRun(ImmutableModel, TenantOwned):
    """One analysis tick: each guardrail's measurement of both arms and the tick's verdict."""

    release = models.ForeignKey(Release, on_delete=models.CASCADE, related_name="analyses")
    stage_index = models.IntegerField()
    verdict = models.CharField(max_length=16)
    decision = models.CharField(max_length=16)
    measurements = models.JSONField(default=list)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.release_id} at {self.at}: {self.verdict}"


class RoutingState(TenantOwned):
    """What serves a tenant's model now: the stable version, and a canary version taking `canary_percent`
    of new sessions. Written only by apps.releases services; read by the gateway through selectors."""

    model = models.CharField(max_length=200)
    stable = models.ForeignKey("training.ModelVersion", on_delete=models.PROTECT, related_name="+")
    canary = models.ForeignKey(
        "training.ModelVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    canary_percent = models.FloatField(default=0)
    release = models.ForeignKey(Release, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "model"], name="routing_unique_model")]

    def __str__(self) -> str:
        return f"{self.model}: {self.stable_id} + {self.canary_id} at {self.canary_percent}%"


class SessionRoute(TimestampedTenantOwned):
    """The version a session was given: written once when a session starts during a canary (so it keeps
    that version when the stage changes), or pinned for an eval session to the version under test."""

    model = models.CharField(max_length=200)
    session_id = models.CharField(max_length=200)
    version = models.ForeignKey("training.ModelVersion", on_delete=models.CASCADE, related_name="+")
    pinned = models.BooleanField(default=False)
    release = models.ForeignKey(Release, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "model", "session_id"], name="session_route_unique_session"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} → {self.version_id}"


class ServingEvent(ImmutableModel, TenantOwned):
    """Serving history, append-only: from `at` on, `stable` served the tenant's model, with `canary` taking
    `canary_percent` of new sessions. The row in force at a moment is the last one at or before it."""

    model = models.CharField(max_length=200)
    stable = models.ForeignKey("training.ModelVersion", on_delete=models.PROTECT, related_name="+")
    canary = models.ForeignKey(
        "training.ModelVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    canary_percent = models.FloatField(default=0)
    release = models.ForeignKey(Release, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    reason = models.CharField(max_length=300)
    actor = models.CharField(max_length=150)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["tenant", "model", "at"])]

    def __str__(self) -> str:
        return f"{self.model} from {self.at}: {self.stable_id} + {self.canary_id} at {self.canary_percent}%"
