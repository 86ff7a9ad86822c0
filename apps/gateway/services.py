from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.gateway.models import BudgetLedger


def _month():
    return timezone.now().date().replace(day=1)


def budget_reserve_amount(*, tenant_id: int, amount: float, budget: float) -> bool:
    """Reserves `amount` only if spent + reserved + amount stays within `budget`: one conditional UPDATE,
    atomic under any concurrency and any number of processes. Returns whether it was reserved."""
    month = _month()
    amount = Decimal(str(round(amount, 6)))
    BudgetLedger.objects.bulk_create([BudgetLedger(tenant_id=tenant_id, month=month)], ignore_conflicts=True)
    ceiling = Decimal(str(budget)) - amount
    updated = BudgetLedger.objects.filter(tenant_id=tenant_id, month=month).filter(
        reserved_usd__lte=ceiling - F("spent_usd")
    ).update(reserved_usd=F("reserved_usd") + amount)
    return updated == 1


@transaction.atomic
def budget_settle_amount(*, tenant_id: int, reserved: float, actual: float) -> None:
    """Releases a reservation and books the actual cost."""
    BudgetLedger.objects.filter(tenant_id=tenant_id, month=_month()).update(
        reserved_usd=F("reserved_usd") - Decimal(str(round(reserved, 6))),
        spent_usd=F("spent_usd") + Decimal(str(round(actual, 6))),
    )
