"""Sessions the gateway creates itself are routed from a per-process snapshot, without reading the
database, spread over replicas by load, and pinned afterwards so later turns stay on their replica."""

import time

import httpx
import pytest

from apps.inference.models import BackendKind, BackendState, SessionAffinity
from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_new_sessions_spread_over_replicas_and_are_pinned(
    gateway, backend, embedded_backend_url, agent_key, tenant
):
    BackendFactory(
        tenant=tenant,
        name="replica-2",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="1",
        state=BackendState.UP,
    )
    url, gw = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    sessions = []
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for number in range(8):  # each a new conversation: the gateway mints its session
            response = client.post(
                "/v1/chat/completions",
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": f"question {number}"}],
                    "max_tokens": 2,
                },
            )
            assert response.status_code == 200
            sessions.append(response.headers["x-session-id"])
    drain(gw)
    by_backend = {}
    for step in Step.objects.filter(tenant=tenant):
        by_backend.setdefault(step.backend_name, set()).add(step.trajectory.session_id)
    assert {name: len(found) for name, found in by_backend.items()} == {"embedded": 4, "replica-2": 4}

    deadline = time.monotonic() + 10  # pins are written off the request path
    while SessionAffinity.objects.filter(tenant=tenant, session_id__in=sessions).count() < 8:
        assert time.monotonic() < deadline, "the new sessions were not pinned"
        time.sleep(0.05)
    pins = dict(SessionAffinity.objects.filter(tenant=tenant).values_list("session_id", "backend__name"))
    assert all(session in by_backend[pins[session]] for session in sessions)


def test_a_down_backend_takes_no_new_sessions(gateway, backend, agent_key, tenant):
    backend.state = BackendState.DOWN
    backend.save()
    url, _ = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_backend_available"
