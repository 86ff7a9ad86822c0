"""The gateway's forward to a backend, seen by an agent through the openai SDK: a backend row whose address is not
allowed (stored before the allow-list, or its entry removed since) is refused before any connection; redirects are
not followed; an oversized backend answer is a 502, not a buffer without end; every step carries the version that
produced it, even from a backend registered without one."""

import json

import httpx
import openai
import pytest

from apps.inference.models import BackendKind, BackendState
from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.network import EMBEDDED_ALLOWED_HOSTS, connections_recorded, listener, scripted_http_server

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "Say hello"}]
COMPLETION = {
    "id": "c-1",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def sdk(url, key):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)


def error_of(client, **request) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(messages=HELLO, max_tokens=4, **request)
    return caught.value


def test_a_backend_at_a_disallowed_address_is_refused_at_forward_time_without_connecting(
    gateway, agent_key, tenant, settings
):
    url, _ = gateway
    settings.AREAL_BACKEND_ALLOWED_HOSTS = list(EMBEDDED_ALLOWED_HOSTS)
    client = sdk(url, agent_key("inference"))
    with listener() as port, connections_recorded() as attempts:
        BackendFactory(tenant=tenant, name="loopback", base_url=port.url, served_model="on-loopback")
        BackendFactory(
            tenant=tenant, name="private", base_url="http://10.0.0.5:8100", served_model="on-private"
        )
        for model in ("on-loopback", "on-private"):
            for stream in (False, True):
                error = error_of(client, model=model, stream=stream)
                assert error.status_code == 502, error.body
                assert error.body["code"] == "backend_address_refused", error.body
                assert "not allowed" in error.body["message"]
        assert not port.connected()
    assert [address for address in attempts if address[0] == "10.0.0.5"] == []


def test_a_redirecting_backend_is_not_followed(gateway, agent_key, tenant):
    url, _ = gateway
    client = sdk(url, agent_key("inference"))
    with scripted_http_server({("POST", "/v1/chat/completions"): (200, {}, COMPLETION)}) as (
        target,
        target_hits,
    ):
        redirect = (307, {"Location": f"{target}/v1/chat/completions"}, b"")
        with scripted_http_server({("POST", "/v1/chat/completions"): redirect}) as (
            backend_url,
            backend_hits,
        ):
            BackendFactory(tenant=tenant, name="redirecting", base_url=backend_url, served_model=MODEL)
            for stream in (False, True):
                error = error_of(client, model=MODEL, stream=stream)
                assert error.status_code == 502, error.body
    assert len(backend_hits) == 2
    assert target_hits == []


def test_an_oversized_backend_answer_is_a_502(gateway, agent_key, tenant, settings):
    url, gw = gateway
    settings.AREAL_GATEWAY_MAX_RESPONSE_BYTES = 50_000
    huge = {
        **COMPLETION,
        "choices": [{**COMPLETION["choices"][0], "message": {"role": "assistant", "content": "x" * 200_000}}],
    }
    chunk = {
        "id": "c-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": "y" * 1000}, "finish_reason": None}],
    }
    stream_body = (
        b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(200)) + b"data: [DONE]\n\n"
    )
    routes = {("POST", "/v1/chat/completions"): (200, {}, huge)}
    with scripted_http_server(routes) as (backend_url, _):
        BackendFactory(tenant=tenant, name="huge", base_url=backend_url, served_model=MODEL)
        key = agent_key("inference")
        error = error_of(sdk(url, key), model=MODEL)
        assert error.status_code == 502, error.body
        assert error.body["code"] == "backend_response_too_large", error.body
        routes[("POST", "/v1/chat/completions")] = (200, {"Content-Type": "text/event-stream"}, stream_body)
        received = b""
        try:
            with httpx.stream(
                "POST",
                f"{url}/v1/chat/completions",
                timeout=20,
                headers={"Authorization": f"Bearer {key}"},
                json={"model": MODEL, "messages": HELLO, "stream": True, "max_tokens": 4},
            ) as response:
                for data in response.iter_bytes():
                    received += data
        except httpx.HTTPError:
            pass  # the stream is cut
    assert b"[DONE]" not in received
    assert 0 < len(received) < 100_000
    drain(gw)
    cut = Step.objects.filter(tenant=tenant, aborted=True).order_by("-created_at").first()
    assert cut is not None
    assert "too large" in cut.error


def test_steps_carry_the_version_the_embedded_server_reports_when_the_row_has_none(
    gateway, agent_key, tenant, embedded_backend_url
):
    url, gw = gateway
    BackendFactory(
        tenant=tenant,
        name="unversioned",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version="",
        state=BackendState.UP,
    )  # the server runs version 1
    client = sdk(url, agent_key("inference"))
    unary = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4, temperature=0)
    streamed = [
        chunk.id
        for chunk in client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=4, temperature=0, stream=True
        )
    ]
    drain(gw)
    assert Step.objects.get(pk=unary.id).model_version == "1"
    assert Step.objects.get(pk=streamed[0]).model_version == "1"


def test_steps_carry_the_version_a_vllm_server_reported_at_its_check(gateway, agent_key, tenant, api_client):
    """vLLM's answers name no version; its GET /weight_info does, and the check records it on the row."""
    url, gw = gateway
    routes = {
        ("GET", "/health"): (200, {}, {}),
        ("GET", "/weight_info"): (200, {}, {"weight_version": "v7"}),
        ("POST", "/v1/chat/completions"): (200, {}, COMPLETION),
    }
    with scripted_http_server(routes) as (backend_url, _):
        backend = BackendFactory(
            tenant=tenant,
            name="vllm",
            base_url=backend_url,
            kind=BackendKind.VLLM,
            served_model=MODEL,
            model_version="",
        )
        checked = api_client(["admin"]).post(f"/api/v1/backends/{backend.pk}/check/").json()
        assert checked["state"] == "up"
        assert checked["reported_version"] == "v7"
        reply = sdk(url, agent_key("inference")).chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=4
        )
    drain(gw)
    assert Step.objects.get(pk=reply.id).model_version == "v7"
