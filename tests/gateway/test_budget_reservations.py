"""A process that dies between reserving a call's budget and settling it must not hold that budget forever:
reservations older than the longest a call can take are released, and calls go through again."""

import time

import httpx
import pytest

from apps.gateway.models import BudgetLedger
from apps.gateway.services import budget_reserve_amount
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_crashed_process_reservation_is_released_after_its_deadline(
    gateway, backend, agent_key, tenant, settings
):
    settings.AREAL_GATEWAY_RESERVATION_SECONDS = 2
    tenant.policy.monthly_budget_usd = "0.02"
    tenant.policy.price_table = {MODEL: {"prompt_per_1k": 0, "completion_per_1k": 1.0}}
    tenant.policy.save()
    # What a process killed mid-call leaves behind: the whole budget reserved, never settled.
    assert budget_reserve_amount(tenant_id=tenant.pk, amount=0.02, budget=0.02)
    url, _ = gateway
    call = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 5}
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    while_in_flight = httpx.post(f"{url}/v1/chat/completions", json=call, headers=headers)
    assert while_in_flight.status_code == 429, "a reservation younger than the deadline still counts"
    assert while_in_flight.json()["error"]["code"] == "budget_exceeded"
    time.sleep(2.5)
    after_deadline = httpx.post(f"{url}/v1/chat/completions", json=call, headers=headers)
    assert after_deadline.status_code == 200, after_deadline.text
    deadline = time.monotonic() + 10
    while (
        ledger := BudgetLedger.objects.get(tenant=tenant)
    ).reserved_usd != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ledger.reserved_usd == 0
    assert 0 < ledger.spent_usd <= 0.005


def test_settling_after_the_reservation_was_released_books_the_cost_once(tenant):
    """A call slower than the deadline settles after its reservation was released: its cost is booked and no
    reservation is released twice."""
    from datetime import timedelta

    from apps.gateway.services import budget_reservations_expire, budget_settle_amount

    reservation = budget_reserve_amount(tenant_id=tenant.pk, amount=0.5, budget=1.0)
    other = budget_reserve_amount(tenant_id=tenant.pk, amount=0.25, budget=1.0)
    assert reservation
    assert other
    assert budget_reservations_expire(older_than=timedelta(seconds=-1)) == 2
    assert budget_reservations_expire(older_than=timedelta(seconds=-1)) == 0
    budget_settle_amount(tenant_id=tenant.pk, reservation=reservation, actual=0.1)
    ledger = BudgetLedger.objects.get(tenant=tenant)
    assert ledger.reserved_usd == 0
    assert float(ledger.spent_usd) == pytest.approx(0.1)
