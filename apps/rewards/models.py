import uuid

from django.db import models

from apps.core.models import TimestampedTenantOwned
from apps.rewards.choices import (  # noqa: F401 (re-exported)
    Combination,
    EvaluatorKind,
    EvaluatorRunStatus,
    RewardKind,
    RewardSource,
    RewardTarget,
    RewardTiming,
)


class RewardSpec(TimestampedTenantOwned):
    """What a reward means for a tenant's agent (blank agent: every agent): kind, range or categories,
    whether it is the training reward and how its sources combine."""

    agent_name = models.CharField(max_length=200, blank=True, help_text="Blank: every agent of the tenant.")
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=RewardKind.choices)
    minimum = models.FloatField(null=True, blank=True)
    maximum = models.FloatField(null=True, blank=True)
    categories = models.JSONField(default=dict, blank=True, help_text='Categorical: {"label": value}.')
    is_training_reward = models.BooleanField(default=False)
    combination = models.CharField(max_length=16, choices=Combination.choices, default=Combination.PRIORITY)
    source_priority = models.JSONField(default=list, blank=True, help_text="Sources, most trusted first.")
    source_weights = models.JSONField(default=dict, blank=True, help_text='Weighted sum: {"source": weight}.')
    description = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_name", "name"], name="rewardspec_unique_name"),
            models.UniqueConstraint(
                fields=["tenant", "agent_name"],
                condition=models.Q(is_training_reward=True),
                name="rewardspec_one_training_reward",
            ),
        ]
        ordering = ["agent_name", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.agent_name or 'all agents'})"


class Reward(TimestampedTenantOwned):
    """An ATDP reward: appended beside the causal record, never edited."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    trajectory = models.ForeignKey(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="rewards"
    )
    step_id = models.UUIDField(null=True, blank=True)
    target = models.CharField(max_length=16, choices=RewardTarget.choices)
    value = models.FloatField()
    kind = models.CharField(max_length=16, choices=RewardKind.choices, default=RewardKind.NUMERIC)
    label = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=RewardSource.choices, default=RewardSource.AGENT)
    timing = models.CharField(max_length=16, choices=RewardTiming.choices, default=RewardTiming.IMMEDIATE)
    created_by = models.CharField(max_length=200, blank=True)
    # NULL, not "": rewards without a key must not collide on the unique constraint.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # Whose key it is: "<source>/<principal>" (services.idempotency_scope). Keys are unique within a scope,
    # so no caller can claim a key another source or principal will use. "": imported or legacy rows.
    idempotency_scope = models.CharField(max_length=200, blank=True, default="")
    spec = models.ForeignKey(
        RewardSpec, null=True, blank=True, on_delete=models.PROTECT, related_name="rewards"
    )
    is_override = models.BooleanField(default=False, help_text="An operator's override: beats every source.")
    reason = models.TextField(blank=True, help_text="Why an operator overrode.")
    evidence = models.JSONField(
        default=dict,
        blank=True,
        help_text="What an evaluator based it on (an LLM judge: its step id, model).",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_scope", "idempotency_key"],
                name="reward_unique_scoped_idempotency_key",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(target="step", step_id__isnull=False)
                    | models.Q(target="trajectory", step_id__isnull=True)
                ),
                name="reward_exactly_one_target",
            ),
        ]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.value} on {self.target} {self.step_id or self.trajectory_id}"


class Evaluator(TimestampedTenantOwned):
    """A rule that scores ended trajectories on a worker (workers.rewards.evaluators); its results are
    rewards with source `evaluator` and `created_by` "<name>@<version>"."""

    name = models.CharField(max_length=120)
    version = models.CharField(max_length=40, default="1")
    kind = models.CharField(max_length=24, choices=EvaluatorKind.choices)
    config = models.JSONField(default=dict, blank=True)
    agent_name = models.CharField(max_length=200, blank=True, help_text="Blank: every agent.")
    spec = models.ForeignKey(RewardSpec, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name", "version"], name="evaluator_unique_version")
        ]
        ordering = ["name", "version"]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


class EvaluatorRun(TimestampedTenantOwned):
    """One LLM-judge evaluator version over one trajectory: claimed by a conditional update, then succeeded
    (its reward) or failed (why, and what the judge answered, cut short). A success is final; a failure can be
    run again on request (`POST /api/v1/evaluators/<id>/run/`)."""

    evaluator = models.ForeignKey(Evaluator, on_delete=models.CASCADE, related_name="runs")
    trajectory = models.ForeignKey(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="evaluator_runs"
    )
    status = models.CharField(
        max_length=16, choices=EvaluatorRunStatus.choices, default=EvaluatorRunStatus.RUNNING
    )
    attempts = models.PositiveIntegerField(default=0, help_text="Judge calls made over every run of it.")
    reward = models.ForeignKey(Reward, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error_code = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    raw_answer = models.TextField(
        blank=True, help_text="The judge's answer when it could not be parsed (cut)."
    )
    judge_session_id = models.CharField(max_length=200, blank=True)
    judge_step_id = models.UUIDField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "evaluator", "trajectory"], name="evaluatorrun_unique_trajectory"
            )
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.evaluator_id} on {self.trajectory_id}: {self.status}"
