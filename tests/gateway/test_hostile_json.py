"""A JSON body nested far deeper than any real request is refused with a 4xx in the client's own error shape on
every gateway path and on the REST API, never a 500."""

import httpx
import pytest
from rest_framework.test import APIClient

from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)


def _nested(depth: int) -> bytes:
    return b'{"model": "' + MODEL.encode() + b'", "messages": ' + b"[" * depth + b"]" * depth + b"}"


def _nested_content(depth: int) -> bytes:
    """Parses at this depth; the nesting sits where a message's content goes."""
    return (
        b'{"model": "'
        + MODEL.encode()
        + b'", "max_tokens": 2, "messages": [{"role": "user", "content": '
        + b'[{"type": "text", "text": "x", "extra": '
        + b"[" * depth
        + b"]" * depth
        + b"}]}]}"
    )


@pytest.mark.parametrize("depth", [10_000, 900])
@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/messages",
        "/v1/rewards",
        "/chat/completions",
        "/rl/start_session",
        "/rl/set_reward",
    ],
)
def test_deeply_nested_json_is_a_400_on_the_gateway(gateway, backend, agent_key, path, depth):
    url, _ = gateway
    key = agent_key("inference", "rewards:write")
    if path == "/rl/set_reward":
        key = httpx.post(
            f"{url}/rl/start_session", json={}, headers={"Authorization": f"Bearer {key}"}
        ).json()["api_key"]
    for body in (_nested(depth), _nested_content(depth)):
        response = httpx.post(
            f"{url}{path}",
            content=body,
            headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        assert response.status_code == 400, (path, response.status_code, response.text[:300])
        if path == "/v1/messages":
            error = response.json()
            assert error["type"] == "error"
            assert error["error"]["type"] == "invalid_request_error"
            assert "nested" in error["error"]["message"]
        else:
            error = response.json()["error"]
            assert error["code"] == "invalid_json"
            assert "nested" in error["message"]
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_end_session_refuses_a_deeply_nested_body_and_ends_nothing(gateway, agent_key):
    """end_session reads its body (final_reward, session_id): one too deep is a 400, the session stays open."""
    url, _ = gateway
    key = httpx.post(
        f"{url}/rl/start_session", json={}, headers={"Authorization": f"Bearer {agent_key('inference')}"}
    ).json()["api_key"]
    response = httpx.post(
        f"{url}/rl/end_session",
        content=_nested(10_000),
        headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    empty = httpx.post(f"{url}/rl/end_session", headers={"Authorization": f"Bearer {key}"})
    assert empty.status_code == 200, empty.text


@pytest.mark.parametrize(
    "path", ["/api/v1/keys/", "/api/v1/policy/", "/api/v1/rewards/", "/api/v1/trajectories/import/"]
)
def test_deeply_nested_json_is_a_400_on_the_rest_api(api_client, path):
    client: APIClient = api_client(["admin", "rewards:write", "trajectories:write"])
    body = b'{"name": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    method = client.patch if path == "/api/v1/policy/" else client.post
    response = method(path, data=body, content_type="application/json")
    assert response.status_code == 400, (path, response.status_code, response.content[:300])
    assert response.json()["error"]["code"] == "parse_error"


@pytest.mark.parametrize("model", ["default\x00", "m" * 201])
def test_a_model_name_with_nul_or_too_long_is_refused_before_any_lookup(model):
    from apps.gateway.errors import GatewayError
    from apps.gateway.validation import validate_completion

    with pytest.raises(GatewayError) as refused:
        validate_completion({"model": model, "prompt": "hi"})
    assert (refused.value.status, refused.value.field) == (400, "model")
