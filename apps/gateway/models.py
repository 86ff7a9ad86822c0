from django.db import models
from django.utils import timezone

from apps.core.models import TenantOwned


class BudgetLedger(models.Model):
    """A tenant's spend in one calendar month: settled spend plus reservations of calls in flight."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    spent_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    reserved_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "month"], name="budget_unique_month")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m}: {self.spent_usd} (+{self.reserved_usd} reserved)"


class BudgetReservation(models.Model):
    """One call's share of `BudgetLedger.reserved_usd` while it is in flight: deleted when the call settles, or,
    when its process died before settling, released once older than AREAL_GATEWAY_RESERVATION_SECONDS."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    amount_usd = models.DecimalField(max_digits=14, decimal_places=6)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m}: {self.amount_usd} reserved at {self.created_at:%Y-%m-%d %H:%M:%S}"


class StoredResponse(TenantOwned):
    """A Responses API answer kept for `GET /v1/responses/{id}` and `previous_response_id` (`store`, on by
    default): the response object and the chat conversation it ends (what the agent sent, without the
    instructions, and the reply as the agent received it), which a continuing request extends. Its step
    is `step_id` (the response id is `resp_<step id>`); it goes with that step's trajectory at retention,
    or at its own `retention_until` (the tenant's retention when it was stored), whichever comes first."""

    response_id = models.CharField(max_length=64)
    step_id = models.UUIDField(db_index=True)
    session_id = models.CharField(max_length=200)
    conversation = models.JSONField(default=list)
    response = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    retention_until = models.DateTimeField(null=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "response_id"], name="stored_response_unique_id")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.response_id}"
