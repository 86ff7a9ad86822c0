from django.db import models
from django.utils import timezone

from apps.core.models import ImmutableModel, TenantOwned


class AuditEvent(ImmutableModel, TenantOwned):
    """One governance act. Rows are only ever inserted; each carries the hash of its predecessor in the
    tenant's chain, so an edited, deleted or reordered row breaks verification."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="audit_events")
    sequence = models.PositiveBigIntegerField()
    occurred_at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=16)
    actor_id = models.CharField(max_length=64, blank=True)
    actor_label = models.CharField(max_length=200)
    verb = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict)
    previous_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="audit_unique_sequence")]
        indexes = [models.Index(fields=["tenant", "verb"]), models.Index(fields=["tenant", "occurred_at"])]
        ordering = ["-sequence"]

    def __str__(self) -> str:
        return f"{self.tenant_id}#{self.sequence} {self.verb}"
