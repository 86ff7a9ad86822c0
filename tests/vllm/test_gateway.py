"""The gateway in front of the real vLLM server: the official openai and anthropic SDKs talk to the
gateway, the gateway forwards to vLLM, and each turn is recorded with vLLM's own token ids and logprobs.

Unlike the rest of this tier these tests need Django and the database (PostgreSQL under CI=true)."""

import anthropic
import httpx
import openai
import pytest

from apps.inference.models import BackendKind, BackendState
from apps.trajectories.models import Step
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain, step_tokens
from tests.inference.factories import BackendFactory
from tests.vllm.conftest import SERVED_MODEL
from tests.vllm.helpers import CHAT_MESSAGES, WEATHER_TOOL

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def vllm_backend(tenant, vllm_server):
    return BackendFactory(
        tenant=tenant,
        name="vllm-cpu",
        base_url=vllm_server.base_url,
        kind=BackendKind.VLLM,
        served_model=SERVED_MODEL,
        model_version="0",
        state=BackendState.UP,
    )


def _direct(vllm_server, **body) -> dict:
    """The same request straight to vLLM, asking for its token data."""
    response = httpx.post(
        f"{vllm_server.base_url}/v1/chat/completions",
        timeout=120,
        json={
            "model": SERVED_MODEL,
            "messages": CHAT_MESSAGES,
            "return_token_ids": True,
            "logprobs": True,
            **body,
        },
    )
    response.raise_for_status()
    return response.json()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_sdk_through_the_gateway_records_vllms_tokens(
    gateway,
    vllm_backend,
    vllm_server,  # noqa: F811
    agent_key,
    stream,
):  # noqa: F811
    url, gw = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=agent_key("inference"), max_retries=0, timeout=120)
    request = {"model": SERVED_MODEL, "messages": CHAT_MESSAGES, "max_tokens": 10, "temperature": 0}
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        step_id = chunks[0].id
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    else:
        reply = client.chat.completions.create(**request)
        step_id, text = reply.id, reply.choices[0].message.content
    drain(gw)

    step = Step.objects.get(pk=step_id)
    tokens = step_tokens(step)
    direct = _direct(vllm_server, max_tokens=10, temperature=0)
    assert tokens["prompt_ids"] == direct["prompt_token_ids"]
    assert tokens["completion_ids"] == direct["choices"][0]["token_ids"]
    expected = [entry["logprob"] for entry in direct["choices"][0]["logprobs"]["content"]]
    assert tokens["completion_logprobs"] == pytest.approx(expected, abs=1e-4)
    assert step.action["text"] == text
    assert step.backend_name == "vllm-cpu"
    assert step.completion_tokens == len(tokens["completion_ids"]) > 0


def test_tools_are_forwarded_to_vllm_and_recorded(gateway, vllm_backend, agent_key):  # noqa: F811
    url, gw = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=agent_key("inference"), max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model=SERVED_MODEL, messages=CHAT_MESSAGES, tools=[WEATHER_TOOL], max_tokens=16, temperature=0
    )
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert step.observation["tools"] == [WEATHER_TOOL]
    # The prompt vLLM consumed has the tool schema rendered into it by the chat template.
    assert len(step_tokens(step)["prompt_ids"]) > len(_direct_prompt_ids_without_tools(vllm_backend))


def _direct_prompt_ids_without_tools(backend) -> list[int]:
    response = httpx.post(
        f"{backend.base_url}/v1/chat/completions",
        timeout=120,
        json={"model": SERVED_MODEL, "messages": CHAT_MESSAGES, "max_tokens": 1, "return_token_ids": True},
    )
    return response.json()["prompt_token_ids"]


def test_anthropic_sdk_through_the_gateway_to_vllm(gateway, vllm_backend, agent_key):  # noqa: F811
    url, gw = gateway
    client = anthropic.Anthropic(base_url=url, api_key=agent_key("inference"), max_retries=0, timeout=120)
    message = client.messages.create(
        model=SERVED_MODEL,
        max_tokens=8,
        system="You are a careful assistant.",
        messages=[{"role": "user", "content": "What is the weather in Paris today?"}],
    )
    drain(gw)
    assert message.type == "message"
    assert message.usage.output_tokens > 0
    step = Step.objects.get(pk=message.id.removeprefix("msg_"))
    assert step.endpoint == "messages"
    assert len(step_tokens(step)["completion_ids"]) == message.usage.output_tokens
