"""Policy before the call: budget reserved atomically, consent modes, PII redaction and blocking, rate limits."""

import asyncio

import httpx
import pytest

from apps.gateway.models import BudgetLedger
from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def _policy(tenant, **changes):
    for field, value in changes.items():
        setattr(tenant.policy, field, value)
    tenant.policy.save()


def test_fifty_parallel_calls_cannot_overspend_a_budget_that_fits_ten(gateway, backend, agent_key, tenant):
    # 10 completion tokens at $1 per 1k = $0.01 reserved per call; the budget fits exactly ten reservations.
    _policy(
        tenant, monthly_budget_usd="0.1", price_table={MODEL: {"prompt_per_1k": 0, "completion_per_1k": 1.0}}
    )
    url, gw = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 10}

    async def burst():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(
                *[client.post(f"{url}/v1/chat/completions", json=body, headers=headers) for _ in range(50)]
            )

    responses = asyncio.run(burst())
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0
    assert statuses.count(200) >= 10
    refused = next(response for response in responses if response.status_code == 429)
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert refused.headers["retry-after"]
    # Each call settles just after its response is released; wait for the last settlements.
    import time

    deadline = time.monotonic() + 20
    while (
        ledger := BudgetLedger.objects.get(tenant=tenant)
    ).reserved_usd != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ledger.reserved_usd == 0
    assert 0 < ledger.spent_usd <= 0.1
    drain(gw)
    assert Step.objects.filter(tenant=tenant).count() == statuses.count(200)


def test_rate_limit_rpm(gateway, backend, agent_key, tenant):
    _policy(tenant, rate_limit_rpm=3)
    url, _ = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 2}
    statuses = [httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers) for _ in range(4)]
    assert [response.status_code for response in statuses] == [200, 200, 200, 429]
    assert statuses[-1].json()["error"]["code"] == "rate_limit_rpm"
    assert "retry-after" in statuses[-1].headers


@pytest.mark.parametrize("consent", ["metadata_only", "none"])
def test_consent_modes(gateway, backend, agent_key, tenant, consent):
    _policy(tenant, consent_mode=consent)
    url, gw = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "secret plans"}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    )
    assert response.status_code == 200
    assert response.json()["choices"]
    drain(gw)
    steps = list(Step.objects.filter(tenant=tenant))
    if consent == "none":
        assert steps == []
    else:
        (step,) = steps
        assert step.observation == {}
        assert step.action == {}
        assert step.prompt_ids is None
        assert step.completion_tokens > 0
        assert step.model_version == "1"


def test_pii_is_redacted_before_storage_and_tokens_are_dropped(gateway, backend, agent_key, tenant):
    _policy(tenant, pii_mode="redact", pii_patterns=[{"name": "order", "regex": r"ORD-\d{5}"}])
    url, gw = gateway
    content = "Mail jane.doe@example.com about ORD-12345, card 4111 1111 1111 1111"
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    )
    assert response.status_code == 200
    drain(gw)
    step = Step.objects.get(tenant=tenant)
    stored = step.observation["messages"][0]["content"]
    assert "jane.doe@example.com" not in stored
    assert "4111" not in stored
    assert "ORD-12345" not in stored
    assert {"email", "credit_card", "custom:order"} <= set(step.pii_entities)
    assert step.prompt_ids is None
    assert step.completion_ids is None


def test_pii_block_refuses_before_forwarding(gateway, backend, agent_key, tenant):
    _policy(tenant, pii_mode="block")
    url, gw = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "my key is sk-proj-abcdefghijklmnopqrstuvwx1234"}],
            "max_tokens": 3,
        },
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "pii_blocked"
    assert "api_key" in response.json()["error"]["message"]
    drain(gw)
    assert not Step.objects.filter(tenant=tenant).exists()
