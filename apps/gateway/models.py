from django.db import models
from django.utils import timezone


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
