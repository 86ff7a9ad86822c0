"""The cap a request was reserved for (budget and tokens per minute) is the cap the backend is given: a request
without max_tokens, or with two caps, can never make the backend generate more than was reserved."""

import json
import time
from decimal import Decimal

import httpx
import pytest

from apps.gateway.models import BudgetLedger
from apps.gateway.providers import profiles_clear
from apps.inference.models import InferenceBackend
from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT_CAP = 8


def _policy(tenant, **changes):
    for field, value in changes.items():
        setattr(tenant.policy, field, value)
    tenant.policy.save()


def _usage_of_stream(response: httpx.Response) -> dict:
    usage = None
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            chunk = json.loads(line[5:])
            usage = chunk.get("usage") or usage
    assert usage is not None, response.text
    return usage


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_max_tokens_gets_the_reserved_cap(
    gateway, backend, agent_key, settings, endpoint, stream
):
    settings.AREAL_GATEWAY_DEFAULT_MAX_TOKENS = DEFAULT_CAP
    url, _ = gateway
    body = {"model": MODEL, "stream": stream, "ignore_eos": True}  # ignore_eos: generate until the cap
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "write a long story"}]
    else:
        body["prompt"] = "Once upon a time"
    response = httpx.post(
        f"{url}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}",
        json=body,
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    usage = _usage_of_stream(response) if stream else response.json()["usage"]
    assert 0 < usage["completion_tokens"] <= DEFAULT_CAP


@pytest.mark.parametrize("cap_parameter", ["max_tokens", "max_completion_tokens"])
def test_the_backend_honours_the_cap_in_the_field_it_is_registered_with(
    gateway, backend, agent_key, settings, cap_parameter
):
    """The embedded server reads both fields: whichever the backend is registered with, chat completions stop
    at the cap, and the legacy completions endpoint gets it in max_tokens (the only field it has)."""
    settings.AREAL_GATEWAY_DEFAULT_MAX_TOKENS = DEFAULT_CAP
    InferenceBackend.objects.filter(pk=backend.pk).update(cap_parameter=cap_parameter)
    profiles_clear()
    url, _ = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    calls = {
        "chat/completions": {"messages": [{"role": "user", "content": "write a long story"}]},
        "completions": {"prompt": "Once upon a time"},
    }
    for path, body in calls.items():
        for cap in ({}, {"max_tokens": 5}, {"max_completion_tokens": 5}):
            response = httpx.post(
                f"{url}/v1/{path}",
                json={"model": MODEL, "ignore_eos": True, **body, **cap},
                headers=headers,
                timeout=120,
            )
            assert response.status_code == 200, response.text
            assert 0 < response.json()["usage"]["completion_tokens"] <= (5 if cap else DEFAULT_CAP)


def test_the_larger_of_two_caps_is_reserved(gateway, backend, agent_key, tenant):
    """The backend honours max_completion_tokens over max_tokens: reserving the smaller one would let a call
    spend past the monthly budget."""
    # $1 per 1k completion tokens; the budget fits 15 tokens.
    _policy(
        tenant,
        monthly_budget_usd="0.015",
        price_table={MODEL: {"prompt_per_1k": 0, "completion_per_1k": 1.0}},
    )
    url, _ = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "go"}],
            "max_tokens": 4,
            "max_completion_tokens": 20,
            "ignore_eos": True,
        },
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    )
    if response.status_code == 200:
        assert response.json()["usage"]["completion_tokens"] <= 20
    else:
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "budget_exceeded"
    deadline = time.monotonic() + 10
    while (
        ledger := BudgetLedger.objects.get(tenant=tenant)
    ).reserved_usd != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ledger.spent_usd <= Decimal("0.015")


def test_anthropic_messages_require_max_tokens_and_honour_it(gateway, backend, agent_key):
    url, _ = gateway
    headers = {"x-api-key": agent_key("inference")}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    missing = httpx.post(f"{url}/v1/messages", json=body, headers=headers)
    assert missing.status_code == 400
    assert missing.json()["type"] == "error"
    capped = httpx.post(f"{url}/v1/messages", json={**body, "max_tokens": 3}, headers=headers)
    assert capped.status_code == 200
    assert capped.json()["usage"]["output_tokens"] <= 3


def test_a_long_prompt_without_max_tokens_is_not_refused_for_a_cap_it_never_set(
    gateway, backend, agent_key, settings
):
    """A default cap no smaller than the embedded model's context (4096 tokens): the backend's own limit
    applies, below the reservation, and a prompt near the context's end still gets an answer."""
    from workers.inference.modelgen import MAX_POSITION_EMBEDDINGS as CONTEXT

    settings.AREAL_GATEWAY_DEFAULT_MAX_TOKENS = CONTEXT
    url, _ = gateway
    response = httpx.post(
        f"{url}/v1/completions",
        json={"model": MODEL, "prompt": "one two three " * 420},
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] > CONTEXT - 1024
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= CONTEXT
