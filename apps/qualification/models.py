from django.conf import settings
from django.db import models

from apps.core.models import TenantOwned, TimestampedTenantOwned
from apps.qualification.choices import (  # noqa: F401 (re-exported)
    QualificationStatus,
    ReviewStatus,
)


class Review(TimestampedTenantOwned):
    """A reviewer's verdict on a trajectory. Appended, never edited: the newest is the current one."""

    trajectory = models.ForeignKey(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="reviews"
    )
    status = models.CharField(max_length=16, choices=ReviewStatus.choices)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewer_label = models.CharField(max_length=200, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "trajectory", "-created_at"])]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.status} on {self.trajectory_id}"


class Qualification(TenantOwned):
    """The gate verdict stored beside a trajectory: what the gates said (`gate_status`, `gate_reasons`), an
    operator's override, and the effective `status` and `reasons` the training queue reads."""

    trajectory = models.OneToOneField(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="qualification"
    )
    status = models.CharField(
        max_length=16, choices=QualificationStatus.choices, default=QualificationStatus.PENDING
    )
    reasons = models.JSONField(default=list)
    gate_status = models.CharField(
        max_length=16, choices=QualificationStatus.choices, default=QualificationStatus.PENDING
    )
    gate_reasons = models.JSONField(default=list)
    content_hash = models.CharField(max_length=64, blank=True)
    training_reward = models.FloatField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    override_status = models.CharField(max_length=16, choices=QualificationStatus.choices, blank=True)
    override_reason = models.TextField(blank=True)
    overridden_by = models.CharField(max_length=200, blank=True)
    overridden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "status"]), models.Index(fields=["tenant", "content_hash"])]

    def __str__(self) -> str:
        return f"{self.status} {self.trajectory_id}"


class QualificationReason(TenantOwned):
    """One row per effective reason code of a disqualified trajectory: counts and filters by code."""

    qualification = models.ForeignKey(Qualification, on_delete=models.CASCADE, related_name="reason_rows")
    code = models.CharField(max_length=40)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["qualification", "code"], name="qualificationreason_unique")
        ]
        indexes = [models.Index(fields=["tenant", "code"])]

    def __str__(self) -> str:
        return self.code


class QualificationLimits(TenantOwned):
    """A tenant's length limits for the within_length_limits gate (defaults until an admin sets them)."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    min_steps = models.PositiveIntegerField(default=1)
    max_steps = models.PositiveIntegerField(default=256)
    max_tokens = models.PositiveBigIntegerField(default=262_144)

    def __str__(self) -> str:
        return f"limits of {self.tenant_id}"
