"""Every path an agent may call answers JSON in OpenAI's error shape, never Django's HTML page: unknown paths
under the gateway's prefixes and at the root endpoints AReaL's proxy serves; and a backend's refusal reads
the same whether the request streamed or not."""

import httpx
import pytest

from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)

UNKNOWN = [
    ("GET", "/v1/nope"),
    ("POST", "/v1/chat/nope"),
    ("GET", "/v1/responses/resp_1/input_items"),
    ("GET", "/v1"),
    ("POST", "/rl/nope"),
    ("GET", "/rl"),
    ("POST", "/s/abc/v1/nope"),
    ("GET", "/s/abc"),
    ("GET", "/responses/resp_1/input_items"),
    ("POST", "/chat/nope"),
    ("POST", "/completions/nope"),
    ("POST", "/embeddings"),
    ("GET", "/models/policy-small/nope"),
]


@pytest.mark.parametrize(("method", "path"), UNKNOWN)
def test_an_unknown_gateway_path_is_an_openai_json_404(gateway_url, agent_key, method, path):
    response = httpx.request(
        method, gateway_url + path, headers={"Authorization": f"Bearer {agent_key('inference')}"}, json={}
    )
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert error["type"] == "not_found_error"
    assert path in error["message"] or "/s/<session_id>/v1" in error["message"]


def test_root_endpoints_are_the_gateways_and_the_console_keeps_its_pages(gateway_url, backend, agent_key):
    key = {"Authorization": f"Bearer {agent_key('inference')}"}
    listed = httpx.get(f"{gateway_url}/models", headers=key)
    assert listed.status_code == 200
    assert [model["id"] for model in listed.json()["data"]] == [MODEL]
    assert (
        httpx.post(
            f"{gateway_url}/responses",
            headers=key,
            json={"model": MODEL, "input": "x", "max_output_tokens": 2},
        ).json()["object"]
        == "response"
    )
    messages = httpx.post(f"{gateway_url}/messages", headers=key, json={"model": MODEL})
    assert messages.status_code == 400
    assert messages.json()["type"] == "error"  # Anthropic's shape on /messages
    console = httpx.get(f"{gateway_url}/models/")  # a browser, no key: the console's page (login first)
    assert console.status_code in (200, 302)
    assert "json" not in console.headers.get("content-type", "")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_context_length_refusal_reads_the_same_streamed_and_not(gateway_url, backend, agent_key, path):
    key = {"Authorization": f"Bearer {agent_key('inference')}"}
    if path.endswith("responses"):
        body = {"model": MODEL, "input": "Hello", "max_output_tokens": 5000}
    else:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5000}
    whole = httpx.post(gateway_url + path, headers=key, json=body)
    streamed = httpx.post(gateway_url + path, headers=key, json={**body, "stream": True})
    assert whole.status_code == streamed.status_code == 400
    assert streamed.headers["content-type"] == "application/json"
    assert whole.json() == streamed.json()
    error = whole.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 4096 tokens" in error["message"]
    assert "{" not in error["message"]  # the backend's message, not its JSON body in a string
