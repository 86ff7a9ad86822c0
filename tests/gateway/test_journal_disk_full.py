"""The journal's disk is full: clients get 503 with Retry-After in their own error shape (before the
backend is asked wherever the gateway already knows), no accepted step is lost, the budget is charged for
the compute spent, and the gateway recovers by itself once the disk has room again."""

import errno
import json
import os
import time

import httpx
import pytest

from apps.gateway import generation as generation_module
from apps.gateway import journal as journal_module
from apps.gateway.models import BudgetLedger
from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def _disk_full(monkeypatch, journal):
    """Every write(2) to the journal's file fails with ENOSPC; other writes are untouched."""
    real = os.write

    def write(fd, data):
        if fd == journal.fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def _retry_window_passes(journal):
    journal.unavailable_until = 0.0  # as if Retry-After seconds had gone by


def _stream_lines(url, path, body, headers) -> tuple[int, list[str]]:
    with httpx.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=60) as response:
        return response.status_code, [line for line in response.iter_lines() if line]


def test_a_full_journal_disk_answers_503_and_loses_no_accepted_step(
    gateway, backend, agent_key, tenant, monkeypatch
):
    tenant.policy.monthly_budget_usd = "10"
    tenant.policy.price_table = {MODEL: {"prompt_per_1k": 1.0, "completion_per_1k": 1.0}}
    tenant.policy.save()
    url, gw = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    accepted = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
    assert accepted.status_code == 200
    ids = {accepted.json()["id"]}
    deadline = time.monotonic() + 10
    while BudgetLedger.objects.get(tenant=tenant).reserved_usd != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    spent_before = BudgetLedger.objects.get(tenant=tenant).spent_usd

    _disk_full(monkeypatch, gw.journal)
    # The backend answers, the step cannot be journalled: 503 instead of the answer, nothing recorded.
    refused = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
    assert refused.status_code == 503, refused.text
    assert int(refused.headers["retry-after"]) > 0
    assert refused.json()["error"]["code"] == "journal_unavailable"
    assert refused.json()["error"]["type"] == "api_error"
    ledger = BudgetLedger.objects.get(tenant=tenant)
    assert ledger.reserved_usd == 0
    assert ledger.spent_usd > spent_before

    # While the journal is known to be failing, requests are refused before the backend is asked.
    anthropic = httpx.post(
        f"{url}/v1/messages",
        json={**CHAT, "max_tokens": 4},
        timeout=60,
        headers={**headers, "anthropic-version": "2023-06-01"},
    )
    assert anthropic.status_code == 503
    assert int(anthropic.headers["retry-after"]) > 0
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["message"]
    status, lines = _stream_lines(url, "/v1/chat/completions", {**CHAT, "stream": True}, headers)
    assert status == 503
    assert json.loads(lines[0])["error"]["code"] == "journal_unavailable"

    # A stream whose answer is already out when the journal fails completes; its step still reaches the
    # database (held in memory for the next group commit).
    _retry_window_passes(gw.journal)
    status, lines = _stream_lines(url, "/v1/chat/completions", {**CHAT, "stream": True}, headers)
    assert status == 200
    assert lines[-1] == "data: [DONE]"
    ids.add(json.loads(lines[0][5:])["id"])

    monkeypatch.undo()  # the disk has room again
    _retry_window_passes(gw.journal)
    again = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
    assert again.status_code == 200
    ids.add(again.json()["id"])
    drain(gw)
    assert set(map(str, Step.objects.filter(tenant=tenant).values_list("id", flat=True))) == ids
    for line in gw.journal.path.read_bytes().splitlines():
        json.loads(line)  # no torn or glued record in the file


def test_a_disk_without_room_is_refused_before_forwarding(gateway, backend, agent_key, tenant, monkeypatch):
    url, gw = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    monkeypatch.setattr(journal_module, "free_bytes", lambda directory: 1024)
    forwarded = []
    real_session = generation_module.backend_session
    monkeypatch.setattr(generation_module, "backend_session", lambda: forwarded.append(1) or real_session())
    refused = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) > 0
    assert refused.json()["error"]["code"] == "journal_unavailable"
    assert forwarded == []
    monkeypatch.undo()
    assert httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=60).status_code == 200
    drain(gw)
    assert Step.objects.filter(tenant=tenant).count() == 1
