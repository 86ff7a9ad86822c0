"""The official openai SDK against the real vLLM server: token ids and logprobs come back, streaming or
not, and workers.inference.client parses them into equal-length sequences."""

import pytest
from transformers import AutoTokenizer

from tests.vllm.conftest import SERVED_MODEL
from tests.vllm.helpers import CHAT_MESSAGES, PROMPTS, WEATHER_TOOL, chat, complete

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def _assert_token_data(parsed, *, max_tokens: int):
    choice = parsed.choices[0]
    assert parsed.has_token_data
    assert 0 < len(choice.completion_token_ids) == len(choice.logprobs) <= max_tokens
    assert parsed.usage["prompt_tokens"] == len(parsed.prompt_token_ids)
    assert parsed.usage["completion_tokens"] == len(choice.completion_token_ids)
    assert all(logprob <= 0.0 for logprob in choice.logprobs)
    assert choice.finish_reason in {"length", "stop"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_completion_carries_prompt_and_completion_tokens(openai_client, tokenizer, stream):
    parsed = chat(openai_client, SERVED_MODEL, stream=stream, max_tokens=12, temperature=1.0, seed=7)

    assert parsed.endpoint == "chat"
    _assert_token_data(parsed, max_tokens=12)
    rendered = tokenizer.apply_chat_template(CHAT_MESSAGES, add_generation_prompt=True, tokenize=False)
    assert list(parsed.prompt_token_ids) == tokenizer.encode(rendered, add_special_tokens=False)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_completion_carries_prompt_and_completion_tokens(openai_client, tokenizer, stream):
    parsed = complete(
        openai_client, SERVED_MODEL, PROMPTS[0], stream=stream, max_tokens=12, temperature=1.0, seed=7
    )

    assert parsed.endpoint == "completions"
    _assert_token_data(parsed, max_tokens=12)
    assert list(parsed.prompt_token_ids) == tokenizer.encode(PROMPTS[0], add_special_tokens=False)


def test_streamed_and_whole_answers_agree_for_one_seed(openai_client):
    whole = chat(openai_client, SERVED_MODEL, stream=False, temperature=1.0, seed=11)
    streamed = chat(openai_client, SERVED_MODEL, stream=True, temperature=1.0, seed=11)

    assert streamed.prompt_token_ids == whole.prompt_token_ids
    assert streamed.choices[0].completion_token_ids == whole.choices[0].completion_token_ids
    assert streamed.choices[0].logprobs == pytest.approx(whole.choices[0].logprobs, abs=1e-6)


def test_chat_with_tools_renders_the_tools_into_the_prompt(openai_client, tokenizer):
    parsed = chat(openai_client, SERVED_MODEL, stream=False, tools=[WEATHER_TOOL], temperature=1.0, seed=3)

    _assert_token_data(parsed, max_tokens=12)
    rendered = tokenizer.apply_chat_template(
        CHAT_MESSAGES,
        tools=[WEATHER_TOOL],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert "get_weather" in rendered
    assert list(parsed.prompt_token_ids) == tokenizer.encode(rendered, add_special_tokens=False)
