import uuid

from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwned, TimestampedTenantOwned
from apps.trajectories.choices import (  # noqa: F401 (re-exported)
    EndReason,
    Purpose,
    StepKind,
    TrajectoryStatus,
)

# Gateway trajectory ids are derived from (tenant, session): the gateway attributes a step without a lookup.
# The namespace is public, so anyone can compute another tenant's ids: an id is never proof of ownership.
# Every read and write of steps is scoped by tenant, and an import never chooses a primary key.
TRAJECTORY_NAMESPACE = uuid.UUID("5b0c1a52-7f0e-4c8e-9a43-3c1c2f6ad2b1")


def trajectory_id_for(*, tenant_id: int, session_id: str) -> uuid.UUID:
    return uuid.uuid5(TRAJECTORY_NAMESPACE, f"{tenant_id}:{session_id}")


class Trajectory(TenantOwned):
    """One agent session: an ordered list of steps plus governance. The causal record (steps) is
    immutable once written; totals are maintained with F() increments as steps land."""

    id = models.UUIDField(primary_key=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="trajectories")
    session_id = models.CharField(max_length=200)
    source_trajectory_id = models.UUIDField(
        null=True, blank=True, help_text="The id an imported record carried; imports get a fresh `id`."
    )
    api_key_prefix = models.CharField(max_length=16, blank=True)
    agent_name = models.CharField(max_length=200, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    task_id = models.CharField(max_length=200, blank=True)
    group_id = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=TrajectoryStatus.choices, default=TrajectoryStatus.OPEN)
    purpose = models.CharField(max_length=16, choices=Purpose.choices, default=Purpose.PRODUCTION)
    consent = models.CharField(max_length=16, default="full")
    data_class = models.CharField(max_length=16, default="internal")
    training_use = models.BooleanField(default=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=16, choices=EndReason.choices, blank=True)
    continues = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="continuation",
        help_text="The closed trajectory of the same session whose late steps this one received.",
    )
    retention_until = models.DateTimeField(null=True, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    latency_ms = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "session_id"], name="trajectory_unique_session"),
            models.UniqueConstraint(
                fields=["tenant", "source_trajectory_id"], name="trajectory_unique_source"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-started_at", "id"]),
            models.Index(fields=["tenant", "task_id"]),
            models.Index(fields=["tenant", "group_id"]),
            models.Index(fields=["status", "tenant"], name="trajectory_status_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} ({self.id})"


class Step(TimestampedTenantOwned):
    """One ATDP step. Token arrays are packed binary (workers.atdp.tokens), not JSON lists."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    parent_step_id = models.UUIDField(null=True, blank=True)
    retry_of = models.UUIDField(null=True, blank=True, help_text="The earlier attempt this call repeated.")
    kind = models.CharField(max_length=16, choices=StepKind.choices, default=StepKind.LLM_CALL)
    endpoint = models.CharField(max_length=32, default="chat.completions")
    observation = models.JSONField(default=dict)
    state = models.JSONField(default=dict)
    action = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    tokenizer = models.CharField(max_length=80, blank=True)
    prompt_ids = models.BinaryField(null=True)
    completion_ids = models.BinaryField(null=True)
    completion_logprobs = models.BinaryField(null=True)
    completion_versions = models.BinaryField(null=True)
    loss_mask = models.BinaryField(
        null=True, help_text="ATDP tokens.loss_mask (prompt then completion), run-length packed; null: none."
    )
    retokenized = models.BooleanField(default=False)
    served_model = models.CharField(max_length=200, blank=True)
    model_version = models.CharField(max_length=64, blank=True)
    policy_version = models.IntegerField(null=True, blank=True)
    backend_name = models.CharField(max_length=64, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    scopes = models.JSONField(default=list)
    pii_entities = models.JSONField(default=list)
    aborted = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True)
    imported_fields = models.JSONField(
        null=True,
        blank=True,
        help_text="An imported step's ATDP fields no column holds (versions.tools, versions.prompt_version, "
        "versions.gateway, permissions.data_class, pii.redacted, replayable), exported as they came. "
        "Null for a step this gateway recorded: those are derived from the row and its state.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trajectory", "index"], name="step_unique_index")]
        ordering = ["trajectory", "index"]

    def __str__(self) -> str:
        return f"{self.trajectory_id}#{self.index}"
