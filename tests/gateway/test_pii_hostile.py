"""Hostile bodies against the PII scan, through the real gateway: the scan runs off the event loop, so other
requests keep being answered; what cannot be scanned in time or within the size limit is refused (PII
mode `block`) or stored redacted whole (`redact`), never passed through unscanned."""

import asyncio
import time

import httpx
import pytest

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from workers.pii import PLACEHOLDER_TEMPLATE, UNSCANNED

pytestmark = pytest.mark.django_db(transaction=True)

UNSCANNED_PLACEHOLDER = PLACEHOLDER_TEMPLATE.format(entity=UNSCANNED)


def _policy(tenant, **changes):
    for field, value in changes.items():
        setattr(tenant.policy, field, value)
    tenant.policy.save()


async def _hostile_while_probing(url: str, key: str, hostile: dict, copies: int):
    """Sends `copies` hostile requests and, until they are all answered, GET /v1/models one after another.
    Returns (hostile responses, their seconds, probe latencies, probes answered while hostile ones were
    in flight)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120) as client:
        started = time.monotonic()
        pending = [
            asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=hostile, headers=headers))
            for _ in range(copies)
        ]
        latencies, overlapping = [], 0
        while not all(task.done() for task in pending):
            probe_started = time.monotonic()
            probe = await client.get(f"{url}/v1/models", headers=headers, timeout=30)
            assert probe.status_code == 200
            latencies.append(time.monotonic() - probe_started)
            overlapping += not all(task.done() for task in pending)
            await asyncio.sleep(0.05)
        responses = [await task for task in pending]
        return responses, time.monotonic() - started, latencies, overlapping


def test_models_answer_within_a_second_while_a_quadratic_body_is_scanned(gateway, backend, agent_key, tenant):
    # "eyJ" at every third character made the JWT pattern quadratic: minutes for this body on the event loop
    _policy(tenant, pii_mode="block")
    url, gw = gateway
    hostile = {
        "model": MODEL,
        "max_tokens": 3,
        "messages": [{"role": "user", "content": "eyJ" * 300_000 + " mail a@b.com"}],
    }

    responses, seconds, latencies, _ = asyncio.run(
        _hostile_while_probing(url, agent_key(), hostile, copies=3)
    )

    assert max(latencies) < 1.0, latencies
    assert seconds < 30
    for response in responses:  # scanned to the end: the address after the hostile run is found
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "pii_blocked"
    drain(gw)
    assert not Step.objects.filter(tenant=tenant).exists()


def test_a_catastrophic_tenant_pattern_is_cut_off_and_the_request_refused(
    gateway, backend, agent_key, tenant, settings
):
    settings.AREAL_PII_PATTERN_TIMEOUT_MS = 1500  # long enough for the probes to overlap it
    _policy(tenant, pii_mode="block", pii_patterns=[{"name": "runs", "regex": r"(a+)+$"}])
    url, gw = gateway
    hostile = {
        "model": MODEL,
        "max_tokens": 3,
        "messages": [{"role": "user", "content": "a" * 100_000 + "!"}],
    }

    responses, seconds, latencies, overlapping = asyncio.run(
        _hostile_while_probing(url, agent_key(), hostile, copies=1)
    )

    assert overlapping >= 1, latencies
    assert max(latencies) < 1.0, latencies
    assert seconds < 30
    (response,) = responses
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "pii_unscannable"
    drain(gw)
    assert not Step.objects.filter(tenant=tenant).exists()


def test_text_past_the_scan_limit_is_stored_redacted_whole(gateway, backend, agent_key, tenant, settings):
    settings.AREAL_PII_MAX_SCAN_CHARS = 300
    _policy(tenant, pii_mode="redact")
    url, gw = gateway
    content = "mail jane.doe@example.com " + "and more words " * 30

    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {agent_key()}"},
    )

    assert response.status_code == 200
    drain(gw)
    step = Step.objects.get(tenant=tenant)
    assert step.observation["messages"][0]["content"] == UNSCANNED_PLACEHOLDER
    assert UNSCANNED in step.pii_entities
    assert step.prompt_ids is None


def test_text_past_the_scan_limit_is_refused_under_block(gateway, backend, agent_key, tenant, settings):
    settings.AREAL_PII_MAX_SCAN_CHARS = 300
    _policy(tenant, pii_mode="block")
    url, gw = gateway

    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "plain words " * 50}],
            "max_tokens": 3,
        },
        headers={"Authorization": f"Bearer {agent_key()}"},
    )

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "pii_unscannable"
    assert "AREAL_PII_MAX_SCAN_CHARS" not in response.json()["error"]["message"]  # no server internals
    drain(gw)
    assert not Step.objects.filter(tenant=tenant).exists()


@pytest.mark.parametrize("pii_mode", ["redact", "block"])
def test_a_stored_pattern_that_no_longer_compiles_refuses_the_request(
    gateway, backend, agent_key, tenant, pii_mode
):
    # saved before patterns were validated (the policy service refuses it now); it used to raise on every call
    _policy(tenant, pii_mode=pii_mode, pii_patterns=[{"name": "maybe", "regex": "x?"}])
    url, gw = gateway

    response = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {agent_key()}"},
    )

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "pii_policy_invalid"
    assert "maybe" in response.json()["error"]["message"]
    drain(gw)
    assert not Step.objects.filter(tenant=tenant).exists()
