"""Shared prompts, tolerances and checks of the real-model tier."""

import httpx
import openai

from apps.inference.models import BackendKind, BackendState
from apps.trajectories.models import Step
from tests.gateway.helpers import step_tokens
from tests.inference.factories import BackendFactory
from tests.real_model.conftest import SERVED_MODEL
from workers.inference.chat import render_chat_prompt

# A float32 forward pass in this process against the float32 servers (the embedded one, vLLM-CPU eager):
# measured differences are about 1e-6 (see the tier's README section); two orders of magnitude of slack.
LOGPROB_TOLERANCE = 1e-4
END_OF_TURN = "<|im_end|>"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# A line with CJK, an emoji with a skin-tone modifier (two code points) and a combining accent (e + U+0301):
# in a numbered list SmolLM2 continues with more of the same under greedy decoding.
UNICODE_LINE = "你好世界 🙂👍🏽 café e\u0301"
UNICODE_PROMPT = f"1. {UNICODE_LINE}\n2. {UNICODE_LINE}\n3. {UNICODE_LINE}\n4."


def sdk(url: str, key: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300, **kwargs)


def register_backend(tenant, *, name: str, url: str, kind: str, version: str = "0"):
    return BackendFactory(
        tenant=tenant,
        name=name,
        base_url=url,
        kind=kind,
        served_model=SERVED_MODEL,
        model_version=version,
        state=BackendState.UP,
    )


def embedded_backend(tenant, url: str, version: str = "0"):
    return register_backend(tenant, name="embedded", url=url, kind=BackendKind.EMBEDDED, version=version)


def prompt_ids(tokenizer, messages, *, tools=None) -> list[int]:
    """What a server must feed the model: the rendered chat prompt, tokenized as text (its special tokens
    are written in it)."""
    text = render_chat_prompt(tokenizer, messages, tools=tools)
    return tokenizer(text, add_special_tokens=False).input_ids


def completion_ids_of(tokenizer, text: str, *, stopped: bool) -> list[int]:
    """The tokenizer's ids of a completion's text, with the end-of-turn token when generation stopped on it."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    return ids + ([tokenizer.convert_tokens_to_ids(END_OF_TURN)] if stopped else [])


def recorded(step_id) -> tuple[Step, dict]:
    step = Step.objects.get(pk=step_id)
    return step, step_tokens(step)


def max_error(reference, tokens: dict) -> float:
    expected = reference.token_logprobs(tokens["prompt_ids"], tokens["completion_ids"])
    return max(abs(want - got) for want, got in zip(expected, tokens["completion_logprobs"], strict=True))


def server_version(url: str, admin_token: str) -> int:
    response = httpx.get(
        f"{url}/admin/version", headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
    )
    response.raise_for_status()
    return response.json()["version"]


def ensure_serving(kind: str, url: str, model_dir, version: int) -> None:
    """The server serves `model_dir` as `version` (loaded when it serves another version): the tests that
    read the base's logprobs and the ones that need the trained weights run in any order."""

    from workers.inference.vllm import VllmAdmin

    if kind == BackendKind.EMBEDDED:
        from apps.inference.admin_tokens import inference_admin_token

        token = inference_admin_token(url)
        if server_version(url, token) != version:
            httpx.post(
                f"{url}/admin/load",
                json={"path": str(model_dir), "version": version},
                headers={"Authorization": f"Bearer {token}"},
                timeout=300,
            ).raise_for_status()
        return
    with VllmAdmin(url, timeout_s=300) as admin:
        if (admin.weight_version() or "0") != str(version):
            admin.publish_full_weights(model_dir, version=str(version))
