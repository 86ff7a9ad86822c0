from django.db import models

from apps.core.models import TimestampedTenantOwned
from apps.evaluation.choices import (  # noqa: F401 (re-exported)
    CaseCategory,
    RunStatus,
    Scorer,
    SuiteKind,
)


class EvalSuite(TimestampedTenantOwned):
    """A named set of cases for one tenant (and optionally one agent): a regression suite or the tenant's
    safety checks."""

    name = models.SlugField(max_length=80)
    kind = models.CharField(max_length=16, choices=SuiteKind.choices, default=SuiteKind.REGRESSION)
    agent_name = models.CharField(max_length=200, blank=True)
    description = models.CharField(max_length=300, blank=True)
    created_by = models.CharField(max_length=150, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="eval_suite_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EvalCase(TimestampedTenantOwned):
    """One probe: input messages (or an environment seed that the scorer's program checks), sampling
    parameters, and a scorer with its configuration."""

    suite = models.ForeignKey(EvalSuite, on_delete=models.CASCADE, related_name="cases")
    key = models.SlugField(max_length=80)
    category = models.CharField(max_length=24, choices=CaseCategory.choices, default=CaseCategory.REGRESSION)
    input_messages = models.JSONField(default=list)
    tools = models.JSONField(default=list, blank=True)
    environment = models.JSONField(
        default=dict, blank=True, help_text='{"seed": 7, ...}: handed to the scorer.'
    )
    params = models.JSONField(default=dict, blank=True, help_text="max_tokens, temperature, seed.")
    scorer = models.CharField(max_length=24, choices=Scorer.choices)
    scorer_config = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "suite", "key"], name="eval_case_unique_key")
        ]
        ordering = ["suite", "key"]

    def __str__(self) -> str:
        return f"{self.suite_id}/{self.key}"


RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.FAILED}),
    RunStatus.RUNNING: frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED}),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
}


class EvalRun(TimestampedTenantOwned):
    """A suite executed against one model version through the gateway (purpose `eval`)."""

    suite = models.ForeignKey(EvalSuite, on_delete=models.PROTECT, related_name="runs")
    model_version = models.ForeignKey("training.ModelVersion", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    summary = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=500, blank=True)
    requested_by = models.CharField(max_length=150, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"])]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.suite_id} on {self.model_version_id}"


class EvalCaseResult(TimestampedTenantOwned):
    """One case's outcome in one run; written once per (run, case), so a resumed run skips it."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(EvalCase, on_delete=models.PROTECT, related_name="+")
    score = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(default=False)
    label = models.CharField(max_length=300, blank=True)
    output_text = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    error = models.CharField(max_length=500, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    session_id = models.CharField(max_length=200, blank=True)
    details = models.JSONField(
        default=dict,
        blank=True,
        help_text="The scorer's own account: for BFCL, its error type, the whole reason and each turn's verdict.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "case"], name="eval_result_unique_case")]
        ordering = ["run", "case__key"]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.case_id}: {self.score}"
