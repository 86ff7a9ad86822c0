"""Tool calls end to end, with a model fine-tuned (in the fixture) to call get_weather."""

import json

import openai
import pytest

from tests.workers.inference.conftest import WEATHER_QUESTION, WEATHER_TOOL
from workers.inference.client import parse_stream


@pytest.fixture(scope="module")
def sdk(tool_server):
    return openai.OpenAI(base_url=tool_server.api_url, api_key="unused", max_retries=0)


def ask(sdk, **extra):
    return sdk.chat.completions.create(
        model="default",
        messages=WEATHER_QUESTION,
        tools=[WEATHER_TOOL],
        temperature=0,
        max_tokens=40,
        **extra,
    )


def test_sdk_gets_parsed_tool_calls(sdk, tool_server):
    completion = ask(sdk, extra_body={"return_token_ids": True})
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    end_id = tool_server.engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert choice.model_extra["token_ids"][-1] == end_id  # the end token is kept for training


def test_sdk_gets_streamed_tool_calls(sdk):
    chunks = list(ask(sdk, stream=True))
    deltas = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
    assert len(deltas) == 1
    assert deltas[0].index == 0
    assert deltas[0].id.startswith("call_")
    assert deltas[0].function.name == "get_weather"
    assert json.loads(deltas[0].function.arguments) == {"city": "Paris"}
    assert not "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]
    parsed = parse_stream(chunk.model_dump() for chunk in chunks)
    assert parsed.choices[0].tool_calls[0].name == "get_weather"


def test_tool_choice_none_returns_the_raw_text(sdk):
    completion = ask(sdk, tool_choice="none")
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].message.content.startswith('<tool_call>{"name": "get_weather"')
    assert completion.choices[0].finish_reason == "stop"


def test_ignore_eos_generates_past_the_end_token(sdk):
    completion = ask(sdk, extra_body={"ignore_eos": True, "return_token_ids": True})
    assert len(completion.choices[0].model_extra["token_ids"]) == 40
    assert completion.choices[0].finish_reason == "length"


def test_tool_result_turn_is_accepted(sdk, tool_server):
    call = ask(sdk).choices[0].message.tool_calls[0]
    follow_up = WEATHER_QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"celsius": 21}'},
    ]
    completion = sdk.chat.completions.create(
        model="default",
        messages=follow_up,
        tools=[WEATHER_TOOL],
        max_tokens=5,
        extra_body={"return_token_ids": True},
    )
    prompt_text = tool_server.engine.tokenizer.decode(completion.model_extra["prompt_token_ids"])
    assert (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>'
        in prompt_text
    )
    assert '<|im_start|>user\n<tool_response>\n{"celsius": 21}\n</tool_response><|im_end|>' in prompt_text
