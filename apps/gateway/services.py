"""The monthly budget ledger: calls reserve before forwarding and settle after, atomically under any number of
processes; reservations left by a process that died in between are released after a deadline."""

import logging
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.gateway.models import BudgetLedger, BudgetReservation, StoredResponse
from apps.tenants.models import Tenant

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BudgetHold:
    """A reservation made by `budget_reserve_amount`, handed back to `budget_settle_amount`."""

    pk: int
    month: date
    amount: Decimal


def _month():
    return timezone.now().date().replace(day=1)


def _usd(amount: float) -> Decimal:
    return Decimal(str(round(amount, 6)))


def budget_reserve_amount(*, tenant_id: int, amount: float, budget: float) -> BudgetHold | None:
    """Reserves `amount` only if spent + reserved + amount stays within `budget`: one conditional UPDATE,
    atomic under any concurrency and any number of processes, and a reservation row (with its time) in the
    same transaction. Refused, it first releases the tenant's reservations past their deadline (their
    processes died) and tries once more. Returns the hold, or None when refused."""
    month, amount_usd = _month(), _usd(amount)
    BudgetLedger.objects.bulk_create([BudgetLedger(tenant_id=tenant_id, month=month)], ignore_conflicts=True)
    ceiling = Decimal(str(budget)) - amount_usd
    for attempt in range(2):
        with transaction.atomic():
            updated = (
                BudgetLedger.objects.filter(tenant_id=tenant_id, month=month)
                .filter(reserved_usd__lte=ceiling - F("spent_usd"))
                .update(reserved_usd=F("reserved_usd") + amount_usd)
            )
            if updated == 1:
                reservation = BudgetReservation.objects.create(
                    tenant_id=tenant_id, month=month, amount_usd=amount_usd
                )
                return BudgetHold(pk=reservation.pk, month=month, amount=amount_usd)
        if attempt == 0 and not budget_reservations_expire(
            tenant_id=tenant_id, older_than=timedelta(seconds=settings.AREAL_GATEWAY_RESERVATION_SECONDS)
        ):
            return None
    return None


@transaction.atomic
def budget_settle_amount(*, tenant_id: int, reservation: BudgetHold, actual: float) -> None:
    """Releases a reservation and books the actual cost in the reservation's month. A reservation already
    released past its deadline is not released twice; its cost is still booked."""
    released = BudgetReservation.objects.filter(pk=reservation.pk).delete()[0] == 1
    changes = {"spent_usd": F("spent_usd") + _usd(actual)}
    if released:
        changes["reserved_usd"] = F("reserved_usd") - reservation.amount
    BudgetLedger.objects.filter(tenant_id=tenant_id, month=reservation.month).update(**changes)


def budget_reservations_expire(*, older_than: timedelta, tenant_id: int | None = None) -> int:
    """Releases reservations older than `older_than` (of one tenant, or all): a call cannot run that long, so
    its process died between reserving and settling. Each is deleted and subtracted in one transaction; a
    concurrent settle or expiry of the same row deletes nothing and subtracts nothing. Returns how many."""
    stale = BudgetReservation.objects.filter(created_at__lt=timezone.now() - older_than)
    if tenant_id is not None:
        stale = stale.filter(tenant_id=tenant_id)
    released = 0
    for pk, owner, month, amount in stale.values_list("pk", "tenant_id", "month", "amount_usd")[:1000]:
        with transaction.atomic():
            if BudgetReservation.objects.filter(pk=pk).delete()[0]:
                BudgetLedger.objects.filter(tenant_id=owner, month=month).update(
                    reserved_usd=F("reserved_usd") - amount
                )
                released += 1
    if released:
        logger.warning(
            "released %d budget reservations older than %s (their processes died before settling)",
            released,
            older_than,
        )
    return released


# ---- stored responses (the Responses API's `store`) ------------------------------------------------------
# Not audited: each is one agent call's own answer, recorded as its step is (the step is not audited either).


def stored_response_create(
    *,
    tenant_id: int,
    response_id: str,
    step_id: str,
    session_id: str,
    conversation: list,
    response: dict,
    retention_until,
) -> StoredResponse:
    """Keeps one response for `GET /v1/responses/{id}` and `previous_response_id`. Tenancy: the tenant's.
    Idempotent on (tenant, response id): a second store of the same response replaces the first. One
    statement, its own transaction (an insert that updates on the unique key): it runs before the answer is
    released, so it costs one round trip, not a locking read, an insert and the transaction's own."""
    stored = StoredResponse(
        tenant_id=tenant_id,
        response_id=response_id,
        step_id=step_id,
        session_id=session_id[:200],
        conversation=conversation,
        response=response,
        retention_until=retention_until,
    )
    StoredResponse.objects.bulk_create(
        [stored],
        update_conflicts=True,
        unique_fields=["tenant", "response_id"],
        update_fields=["step_id", "session_id", "conversation", "response", "retention_until"],
    )
    return stored


@transaction.atomic
def stored_response_delete(*, tenant_id: int, response_id: str) -> bool:
    """Deletes the tenant's stored response (`DELETE /v1/responses/{id}`); False when it has none of that id
    (another tenant's included). Idempotent."""
    deleted, _ = StoredResponse.objects.filter(tenant_id=tenant_id, response_id=response_id).delete()
    return bool(deleted)


def stored_responses_forget(*, tenant: Tenant, trajectory_ids) -> int:
    """Retention (apps.trajectories.retention calls this in the transaction that deletes `trajectory_ids`):
    the stored responses of those trajectories' steps go with them, and so does any of the tenant's stored
    responses past its own `retention_until`. Tenancy: only `tenant`'s rows. Idempotent."""
    from django.db.models import Q

    from apps.trajectories.selectors import step_list

    step_ids = step_list(tenant=tenant).filter(trajectory_id__in=list(trajectory_ids)).values("pk")
    deleted, _ = (
        StoredResponse.objects.for_tenant(tenant)
        .filter(Q(step_id__in=step_ids) | Q(retention_until__lte=timezone.now()))
        .delete()
    )
    return deleted
