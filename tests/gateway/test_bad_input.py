"""Every malformed request gets the right 4xx in the client's own error shape, and nothing recorded
before is touched."""

import json

import httpx
import pytest

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

GOOD = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (json.dumps({**GOOD, "max_tokens": -5}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "max_tokens": 10**9}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "max_tokens": "ten"}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "temperature": 7}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "messages": "hello"}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "messages": [{"content": "no role"}]}).encode(), 400, "invalid_request"),
        (json.dumps({**GOOD, "model": "no-such-model"}).encode(), 404, "model_not_found"),
        (
            json.dumps({**GOOD, "messages": [{"role": "user", "content": "x" * (3 * 1024 * 1024)}]}).encode(),
            413,
            "payload_too_large",
        ),
    ],
)
def test_openai_shaped_errors(gateway, backend, agent_key, body, status, code):
    url, gw = gateway
    key = agent_key("inference")
    good = httpx.post(f"{url}/v1/chat/completions", json=GOOD, headers={"Authorization": f"Bearer {key}"})
    assert good.status_code == 200
    response = httpx.post(
        f"{url}/v1/chat/completions",
        content=body,
        headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert error["type"]
    drain(gw)
    assert Step.objects.count() == 1
    assert (
        httpx.post(
            f"{url}/v1/chat/completions", json=GOOD, headers={"Authorization": f"Bearer {key}"}
        ).status_code
        == 200
    )


def test_bad_key_and_wrong_scope(gateway, backend, agent_key):
    url, _ = gateway
    missing = httpx.post(f"{url}/v1/chat/completions", json=GOOD)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "missing_key"
    bad = httpx.post(f"{url}/v1/chat/completions", json=GOOD, headers={"Authorization": "Bearer ak-nope"})
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "authentication_error"
    scoped = httpx.post(
        f"{url}/v1/chat/completions",
        json=GOOD,
        headers={"Authorization": f"Bearer {agent_key('rewards:write')}"},
    )
    assert scoped.status_code == 403
    assert scoped.json()["error"]["code"] == "scope_missing"


def test_model_not_allowed_by_policy_is_403(gateway, backend, agent_key, tenant):
    tenant.policy.allowed_models = ["something-else"]
    tenant.policy.save()
    url, _ = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions", json=GOOD, headers={"Authorization": f"Bearer {agent_key('inference')}"}
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "model_not_allowed"


def test_backend_down_is_502_and_the_failure_is_recorded(gateway, tenant, agent_key):
    from apps.inference.models import BackendState
    from tests.inference.factories import BackendFactory
    from tests.servers import free_port

    BackendFactory(
        tenant=tenant, base_url=f"http://127.0.0.1:{free_port()}", served_model=MODEL, state=BackendState.UP
    )
    url, gw = gateway
    response = httpx.post(
        f"{url}/v1/chat/completions", json=GOOD, headers={"Authorization": f"Bearer {agent_key('inference')}"}
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "backend_error"
    drain(gw)
    step = Step.objects.get()
    assert step.aborted
    assert "ConnectError" in step.error


def test_unknown_path_and_method(gateway, agent_key):
    url, _ = gateway
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    assert httpx.get(f"{url}/v1/chat/completions", headers=headers).status_code == 405
    assert httpx.post(f"{url}/v1/embeddings", json={}, headers=headers).status_code == 404
