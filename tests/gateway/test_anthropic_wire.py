"""The Anthropic Messages <-> OpenAI chat translation: unit tests per rule, stream translation over
hand-written chunk sequences, and the official `anthropic` SDK end to end through tests/gateway/anthropic_app
over a real embedded inference server (and over a scripted backend, for tool calls the tiny model cannot
make). Nothing here needs the database."""

import json
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
import pytest

from apps.gateway.anthropic_response import chat_response_to_message
from apps.gateway.anthropic_stream import ChatStreamToMessageEvents, sse_encode
from apps.gateway.anthropic_wire import (
    TOOL_ERROR_PREFIX,
    AnthropicRequestError,
    anthropic_error,
    messages_request_to_chat,
    openai_error_to_anthropic,
)
from tests.gateway.anthropic_app import create_app, serve_in_thread
from tests.gateway.conftest import MODEL

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
OPENAI_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": WEATHER_TOOL["input_schema"],
    },
}


def test_the_translation_module_does_not_import_django():
    code = (
        "import sys, apps.gateway.anthropic_wire, apps.gateway.anthropic_response, apps.gateway.anthropic_stream; "
        "print(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.stdout.strip() == "False"


def request(**fields) -> dict:
    return {
        "model": "claude-test",
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "Hi"}],
        **fields,
    }


# ---- request translation ---------------------------------------------------------------------------------


def test_minimal_request_translates_and_asks_for_token_data():
    chat = messages_request_to_chat(request(system="Be brief."))
    assert chat == {
        "model": "claude-test",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 32,
        "stream": False,
        "logprobs": True,
        "return_token_ids": True,
    }


def test_system_text_blocks_and_user_text_blocks_are_joined():
    chat = messages_request_to_chat(
        request(
            system=[
                {"type": "text", "text": "One."},
                {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
            ],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ],
        )
    )
    assert chat["messages"] == [
        {"role": "system", "content": "One.\nTwo."},
        {"role": "user", "content": "a\nb"},
    ]


def test_multi_turn_tool_use_conversation():
    body = request(
        system="You are a weather bot.",
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"celsius": 21}'},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "timeout"}],
                    },
                    {"type": "text", "text": "Thanks."},
                ],
            },
            {"role": "assistant", "content": "Paris is 21 degrees; Rome timed out."},
            {"role": "user", "content": "And tomorrow?"},
        ],
    )
    chat = messages_request_to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"celsius": 21}'},
        {"role": "tool", "tool_call_id": "toolu_2", "content": TOOL_ERROR_PREFIX + "timeout"},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "Paris is 21 degrees; Rome timed out."},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert chat["tools"] == [OPENAI_WEATHER_TOOL]
    assert "tool_choice" not in chat
    assert "continue_final_message" not in chat


def test_assistant_turn_with_only_a_tool_call_has_null_content_and_thinking_is_dropped():
    chat = messages_request_to_chat(
        request(
            tools=[WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "use the tool", "signature": "x"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            ],
        )
    )
    assistant, tool = chat["messages"][1:]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert tool == {"role": "tool", "tool_call_id": "toolu_1", "content": ""}


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
        ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ],
)
def test_tool_choice(tool_choice, expected):
    chat = messages_request_to_chat(request(tools=[WEATHER_TOOL], tool_choice=tool_choice))
    assert {key: chat[key] for key in ("tool_choice", "parallel_tool_calls") if key in chat} == expected
    assert chat["tools"] == [OPENAI_WEATHER_TOOL]


def test_tool_choice_auto_without_tools_is_left_out():
    chat = messages_request_to_chat(request(tool_choice={"type": "auto"}))
    assert "tool_choice" not in chat
    assert "tools" not in chat


def test_sampling_fields_metadata_and_stream():
    chat = messages_request_to_chat(
        request(
            stop_sequences=["\n\nHuman:", "END"],
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            metadata={"user_id": "user-7"},
            stream=True,
        )
    )
    assert chat["stop"] == ["\n\nHuman:", "END"]
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (0.5, 0.9, 40)
    assert chat["user"] == "user-7"
    assert "metadata" not in chat
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert chat["logprobs"] is True
    assert chat["return_token_ids"] is True


def test_final_assistant_message_is_a_prefill():
    chat = messages_request_to_chat(
        request(
            messages=[
                {"role": "user", "content": "Say a colour."},
                {"role": "assistant", "content": "The colour is"},
            ]
        )
    )
    assert chat["messages"][-1] == {"role": "assistant", "content": "The colour is"}
    assert chat["continue_final_message"] is True
    assert chat["add_generation_prompt"] is False


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"max_tokens": None}, "max_tokens", "required"),
        ({"max_tokens": -1}, "max_tokens", "positive"),
        ({"max_tokens": 0}, "max_tokens", "positive"),
        ({"max_tokens": True}, "max_tokens", "positive"),
        ({"model": None}, "model", "required"),
        ({"messages": []}, "messages", "non-empty"),
        ({"messages": "Hi"}, "messages", "non-empty"),
        ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages.0.role", "first message"),
        ({"messages": [{"role": "system", "content": "Hi"}]}, "messages.0.role", '"user" or "assistant"'),
        ({"messages": [{"role": "user", "content": []}]}, "messages.0.content", "non-empty"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]},
            "messages.0.content.0.type",
            "'video' is not supported",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": ""}}]}
                ]
            },
            "messages.0.content.0.type",
            "image content blocks are not supported",
        ),
        (
            {"messages": [{"role": "user", "content": [{"text": "no type"}]}]},
            "messages.0.content.0",
            "with a type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages.0.content.0.text",
            "string",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
                ]
            },
            "messages.0.content.0.type",
            "assistant messages",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
                    }
                ]
            },
            "messages.0.content.0.tool_use_id",
            "corresponding tool_use",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": "ok"},
                ]
            },
            "messages.2",
            "without tool_result",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                ]
            },
            "messages.1",
            "without tool_result",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": "city=Paris"}],
                    },
                ]
            },
            "messages.1.content.0.input",
            "object",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    },
                ]
            },
            "messages.2.content.0.content.0.type",
            "image content blocks are not supported",
        ),
        ({"tools": [{"name": "f"}]}, "tools.0.input_schema", "JSON Schema"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type", "not supported"),
        ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools.1.name", "unique"),
        (
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "other"}},
            "tool_choice.name",
            "not in tools",
        ),
        ({"tool_choice": {"type": "any"}}, "tool_choice.type", "at least one tool"),
        ({"tools": [WEATHER_TOOL], "tool_choice": "auto"}, "tool_choice", "object"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "sometimes"}}, "tool_choice.type", '"auto"'),
        ({"temperature": 1.5}, "temperature", "between 0 and 1"),
        ({"top_p": "high"}, "top_p", "number"),
        ({"top_k": -1}, "top_k", "non-negative"),
        ({"stop_sequences": "END"}, "stop_sequences", "array"),
        ({"stop_sequences": [""]}, "stop_sequences", "non-empty strings"),
        ({"metadata": {"user_id": 7}}, "metadata.user_id", "string"),
        ({"stream": "yes"}, "stream", "boolean"),
        ({"system": [{"type": "image"}]}, "system.0", "text blocks"),
    ],
)
def test_invalid_requests_name_the_field(change, field, words):
    body = {key: value for key, value in {**request(), **change}.items() if value is not None}
    with pytest.raises(AnthropicRequestError) as caught:
        messages_request_to_chat(body)
    assert caught.value.field == field
    assert words in caught.value.message
    assert caught.value.body() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": f"{field}: {caught.value.message}"},
    }


def test_request_body_must_be_an_object():
    with pytest.raises(AnthropicRequestError) as caught:
        messages_request_to_chat(["not", "a", "dict"])
    assert caught.value.field is None
    assert caught.value.status == 400


# ---- non-streaming response translation ------------------------------------------------------------------


def chat_completion(message: dict, finish_reason="stop", *, stop_reason=None, usage=None, **extra) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "default",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                **extra.pop("choice", {}),
            }
        ],
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
        **extra,
    }


def test_text_response():
    message = chat_response_to_message(
        chat_completion({"content": "Hello there"}), model="claude-test", message_id="msg_fixed"
    )
    assert message == {
        "id": "msg_fixed",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "Hello there"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 11,
            "output_tokens": 4,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    generated = chat_response_to_message(chat_completion({"content": "x"}), model="m")["id"]
    assert generated.startswith("msg_")
    assert len(generated) > 8


def test_tool_calls_become_tool_use_blocks():
    chat = chat_completion(
        {
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}},
            ],
        },
        "tool_calls",
    )
    message = chat_response_to_message(chat, model="m")
    assert message["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_tool_call_without_id_gets_one():
    chat = chat_completion(
        {"content": None, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        "tool_calls",
    )
    [block] = chat_response_to_message(chat, model="m")["content"]
    assert block["type"] == "tool_use"
    assert block["id"].startswith("toolu_")


@pytest.mark.parametrize("arguments", ['{"city": "Par', "[1, 2]", "not json"])
def test_malformed_tool_call_arguments_stay_text(arguments):
    chat = chat_completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        "tool_calls",
    )
    message = chat_response_to_message(chat, model="m")
    [block] = message["content"]
    assert block["type"] == "text"
    assert json.loads(block["text"]) == {"name": "get_weather", "arguments": arguments}
    assert message["stop_reason"] == "end_turn"


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason", "stop_sequences", "expected"),
    [
        ("stop", None, None, ("end_turn", None)),
        ("stop", 151645, None, ("end_turn", None)),  # a stop token id: the model ended its turn
        ("stop", "END", None, ("stop_sequence", "END")),
        ("stop", "END", ["END", "STOP"], ("stop_sequence", "END")),
        ("stop", "<|im_end|>", ["END"], ("end_turn", None)),  # a stop string the client did not ask for
        ("length", None, None, ("max_tokens", None)),
        ("content_filter", None, None, ("refusal", None)),
        (None, None, None, ("end_turn", None)),
    ],
)
def test_stop_reasons(finish_reason, stop_reason, stop_sequences, expected):
    chat = chat_completion({"content": "text"}, finish_reason, stop_reason=stop_reason)
    message = chat_response_to_message(chat, model="m", stop_sequences=stop_sequences)
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_length_wins_over_a_tool_call():
    chat = chat_completion(
        {
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        "length",
    )
    assert chat_response_to_message(chat, model="m")["stop_reason"] == "max_tokens"


def test_usage_falls_back_to_token_ids_and_counts_cached_prompt_tokens():
    chat = chat_completion(
        {"content": "ab"}, usage={}, prompt_token_ids=[1, 2, 3], choice={"token_ids": [7, 8]}
    )
    chat.pop("usage")
    assert chat_response_to_message(chat, model="m")["usage"] == {
        "input_tokens": 3,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    cached = chat_completion(
        {"content": "ab"},
        usage={"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 6}},
    )
    assert chat_response_to_message(cached, model="m")["usage"] == {
        "input_tokens": 4,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 6,
    }


def test_empty_reply_has_no_content_blocks_and_no_choices_is_an_error():
    assert chat_response_to_message(chat_completion({"content": ""}), model="m")["content"] == []
    with pytest.raises(ValueError, match="has no choices"):
        chat_response_to_message({"choices": []}, model="m")


# ---- stream translation ------------------------------------------------------------------------------------


def chunk(delta=None, finish_reason=None, **extra) -> dict:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
    choice.update(extra.pop("choice", {}))
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "default",
        "choices": [choice],
        **extra,
    }


def usage_chunk(prompt, completion) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def run_stream(chunks, **options) -> list[tuple[str, dict]]:
    translator = ChatStreamToMessageEvents(model="claude-test", message_id="msg_s", **options)
    events = []
    for item in chunks:
        events += translator.feed(item)
    events += translator.finish()
    assert translator.finish() == []
    assert_well_formed(events)
    return events


def assert_well_formed(events):
    """The Anthropic stream grammar: message_start, blocks (start, deltas of the block's kind, stop) with
    consecutive indices, one message_delta, message_stop; pings anywhere; every event's data names itself."""
    names = [name for name, _ in events if name != "ping"]
    assert all(data["type"] == name for name, data in events)
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_delta") == 1
    open_block, next_index = None, 0
    for name, data in events:
        if name == "content_block_start":
            assert open_block is None
            assert data["index"] == next_index
            open_block, next_index = data["content_block"]["type"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == next_index - 1
            assert data["delta"]["type"] == {"text": "text_delta", "tool_use": "input_json_delta"}[open_block]
        elif name == "content_block_stop":
            assert open_block is not None
            assert data["index"] == next_index - 1
            open_block = None
        elif name in ("message_delta", "message_stop"):
            assert open_block is None


def final_message(events) -> dict:
    """Fold a translated event list into the message it describes (as a client would)."""
    message, partial = None, {}
    for name, data in events:
        if name == "message_start":
            message = json.loads(json.dumps(data["message"]))
        elif name == "content_block_start":
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block = message["content"][data["index"]]
            if data["delta"]["type"] == "text_delta":
                block["text"] += data["delta"]["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + data["delta"]["partial_json"]
                block["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"].update(data["usage"])
    return message


def test_text_stream_events():
    events = run_stream(
        [
            chunk(
                {"role": "assistant", "content": ""},
                prompt_token_ids=[1, 2, 3, 4, 5],
                choice={"token_ids": []},
            ),
            chunk({"content": "Hel"}, choice={"token_ids": [10]}),
            chunk({"content": "lo"}, choice={"token_ids": [11]}),
            chunk({}, "stop", choice={"token_ids": [2], "stop_reason": None}),
            usage_chunk(5, 3),
        ]
    )
    assert events == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_s",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 5,
                        "output_tokens": 0,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                    },
                },
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 3, "input_tokens": 5, "cache_read_input_tokens": 0},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_tool_call_split_over_chunks_after_text():
    events = run_stream(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Let me check."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "Par'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'is"}'}}]}),
            chunk({}, "tool_calls"),
            usage_chunk(20, 12),
        ],
        ping=False,
    )
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[4][1]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {},
    }
    assert events[5][1] == {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'},
    }
    message = final_message(events)
    assert message["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["output_tokens"] == 12


def test_parallel_tool_calls_in_one_chunk_and_interleaved_fragments():
    events = run_stream(
        [
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": '{"x":'}},
                        {"index": 1, "id": "call_b", "function": {"name": "g", "arguments": '{"y":'}},
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {"index": 1, "function": {"arguments": " 2}"}},
                        {"index": 0, "function": {"arguments": " 1}"}},
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    message = final_message(events)
    assert message["content"] == [
        {"type": "tool_use", "id": "call_a", "name": "f", "input": {"x": 1}},
        {"type": "tool_use", "id": "call_b", "name": "g", "input": {"y": 2}},
    ]
    assert message["stop_reason"] == "tool_use"


def test_whole_tool_call_in_one_delta_as_the_embedded_server_sends_it():
    events = run_stream(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_z",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                        }
                    ]
                },
                "tool_calls",
            ),
        ]
    )
    assert final_message(events)["content"] == [
        {"type": "tool_use", "id": "call_z", "name": "get_weather", "input": {"city": "Rome"}}
    ]


def test_malformed_streamed_tool_call_becomes_text_and_the_turn_ends():
    events = run_stream(
        [
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"x": '}}
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    message = final_message(events)
    assert message["content"] == [{"type": "text", "text": json.dumps({"name": "f", "arguments": '{"x": '})}]
    assert message["stop_reason"] == "end_turn"


def test_text_after_a_tool_call_closes_the_call_first():
    events = run_stream(
        [
            chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
            chunk({"content": "done"}),
            chunk({}, "stop"),
        ]
    )
    assert [block["type"] for block in final_message(events)["content"]] == ["tool_use", "text"]


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason", "expected"),
    [
        ("stop", None, ("end_turn", None)),
        ("stop", "END", ("stop_sequence", "END")),
        ("length", None, ("max_tokens", None)),
        ("content_filter", None, ("refusal", None)),
    ],
)
def test_stream_finish_reasons(finish_reason, stop_reason, expected):
    events = run_stream(
        [chunk({"content": "abc"}), chunk({}, finish_reason, choice={"stop_reason": stop_reason})],
        stop_sequences=["END"],
    )
    delta = events[-2][1]["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"]) == expected


def test_stream_usage_without_a_usage_chunk_counts_token_ids():
    events = run_stream(
        [
            chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2]),
            chunk({"content": "a"}, choice={"token_ids": [5]}),
            chunk({"content": "b"}, "length", choice={"token_ids": [6]}),
        ]
    )
    assert events[0][1]["message"]["usage"]["input_tokens"] == 2
    assert events[-2][1]["usage"] == {"output_tokens": 2}


def test_finish_without_chunks_is_a_well_formed_empty_message_and_feed_after_finish_is_ignored():
    translator = ChatStreamToMessageEvents(model="m", message_id="msg_e", ping=False)
    events = translator.finish()
    assert [name for name, _ in events] == ["message_start", "message_delta", "message_stop"]
    assert translator.feed(chunk({"content": "late"})) == []
    assert translator.finish() == []


def test_error_chunk_becomes_an_error_event_and_ends_the_stream():
    translator = ChatStreamToMessageEvents(model="m", message_id="msg_e")
    translator.feed(chunk({"content": "a"}))
    events = translator.feed({"error": {"message": "engine died", "type": "server_error"}})
    assert events == [("error", {"type": "error", "error": {"type": "api_error", "message": "engine died"}})]
    assert translator.finished
    assert translator.finish() == []


def test_sse_encode():
    encoded = sse_encode("content_block_delta", {"type": "content_block_delta", "text": "a\nb"})
    assert encoded == b'event: content_block_delta\ndata: {"type":"content_block_delta","text":"a\\nb"}\n\n'
    assert (
        ChatStreamToMessageEvents.sse_encode("ping", {"type": "ping"})
        == b'event: ping\ndata: {"type":"ping"}\n\n'
    )


# ---- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, "invalid_request_error"),
        (422, "invalid_request_error"),
        (409, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (504, "api_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_error_type_follows_status(status, error_type):
    assert anthropic_error(status, "boom") == {
        "type": "error",
        "error": {"type": error_type, "message": "boom"},
    }


def test_anthropic_error_explicit_type_and_backend_errors():
    assert anthropic_error(429, "wait", error_type="overloaded_error")["error"]["type"] == "overloaded_error"
    backend = {
        "error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}
    }
    assert openai_error_to_anthropic(400, backend) == anthropic_error(400, "too long")
    assert openai_error_to_anthropic(502, "Bad Gateway") == anthropic_error(502, "Bad Gateway")
    assert openai_error_to_anthropic(500, None)["error"]["message"] == "inference backend answered 500"


# ---- end to end: the official SDK over a real embedded server ------------------------------------------------


# `default_model_dir` (session-scoped, the default model made once in a tmp dir) and `embedded_backend_url`
# (the embedded server over it, in a subprocess, serving MODEL) come from tests/gateway/conftest.py.


@pytest.fixture(scope="module")
def anthropic_sdk(embedded_backend_url):
    with serve_in_thread(create_app(f"{embedded_backend_url}/v1", backend_model=MODEL)) as url:
        yield anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)


@pytest.fixture(scope="module")
def backend_prompt_ids(default_model_dir):
    """body -> the token ids the embedded server renders for our translation of that Anthropic request."""
    from transformers import AutoTokenizer

    from workers.inference.chat import render_chat_prompt

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)

    def prompt_ids(body: dict) -> list[int]:
        chat = messages_request_to_chat({key: value for key, value in body.items() if key != "extra_body"})
        prompt = render_chat_prompt(tokenizer, chat["messages"], tools=chat.get("tools"))
        return tokenizer.backend_tokenizer.encode(prompt, add_special_tokens=False).ids

    return prompt_ids


# anthropic>=2 has no `temperature` argument any more; raw clients and older SDKs still send it, so it is
# translated, and here it rides in extra_body (greedy decoding makes the answers comparable).
ASK = {
    "model": "claude-test",
    "max_tokens": 12,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "What is 2 + 2?"}],
    "extra_body": {"temperature": 0},
}


def test_sdk_create(anthropic_sdk, backend_prompt_ids):
    message = anthropic_sdk.messages.create(**ASK)
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.model == "claude-test"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.stop_sequence is None
    assert [block.type for block in message.content] in (["text"], [])
    assert message.usage.input_tokens == len(backend_prompt_ids(ASK))
    assert 1 <= message.usage.output_tokens <= 12
    assert (message.usage.output_tokens == 12) == (message.stop_reason == "max_tokens")


def test_sdk_stream_helper_matches_the_whole_answer(anthropic_sdk):
    whole = anthropic_sdk.messages.create(**ASK)
    with anthropic_sdk.messages.stream(**ASK) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 1
    assert "".join(pieces) == "".join(block.text for block in final.content) == whole.content[0].text
    assert final.id.startswith("msg_")
    assert final.model == "claude-test"
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == (
        whole.stop_reason,
        whole.usage.input_tokens,
        whole.usage.output_tokens,
    )


def test_sdk_raw_stream_events_are_well_formed(anthropic_sdk):
    whole = anthropic_sdk.messages.create(**ASK)
    events = [(event.type, event.to_dict()) for event in anthropic_sdk.messages.create(**ASK, stream=True)]
    assert_well_formed(events)
    text = "".join(
        data["delta"]["text"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "text_delta"
    )
    assert text == whole.content[0].text
    assert events[-2][1]["usage"]["output_tokens"] == whole.usage.output_tokens


def test_sdk_stop_sequence(anthropic_sdk):
    whole = anthropic_sdk.messages.create(**{**ASK, "max_tokens": 24}).content[0].text
    # the two characters whose first occurrence is latest: greedy decoding stops right before them
    windows = [whole[i : i + 2] for i in range(len(whole) - 1) if whole[i : i + 2].strip()]
    assert windows, f"the greedy answer {whole!r} is too short to cut"
    stop = max(windows, key=whole.index)
    message = anthropic_sdk.messages.create(**{**ASK, "max_tokens": 24}, stop_sequences=[stop])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert "".join(block.text for block in message.content) == whole[: whole.index(stop)]
    with anthropic_sdk.messages.stream(**{**ASK, "max_tokens": 24}, stop_sequences=[stop]) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


def test_sdk_request_with_tools_and_a_tool_history_is_accepted(anthropic_sdk, backend_prompt_ids):
    body = {**ASK, "max_tokens": 4, "tools": [WEATHER_TOOL], "tool_choice": {"type": "auto"}}
    message = anthropic_sdk.messages.create(**body)
    assert message.usage.input_tokens == len(backend_prompt_ids(body))
    assert message.usage.input_tokens > len(backend_prompt_ids(ASK))  # the tool reached the template
    history = {
        **body,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": '{"celsius": 21}'}],
            },
        ],
    }
    message = anthropic_sdk.messages.create(**history)
    assert message.usage.input_tokens == len(backend_prompt_ids(history))
    with anthropic_sdk.messages.stream(**history) as stream:
        assert stream.get_final_message().usage.input_tokens == message.usage.input_tokens


def test_sdk_invalid_body_is_a_bad_request(anthropic_sdk):
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic_sdk.messages.create(**{**ASK, "max_tokens": -1})
    assert caught.value.status_code == 400
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: must be a positive integer",
    }
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match="image content blocks are not supported"):
        anthropic_sdk.messages.create(**{**ASK, "messages": [{"role": "user", "content": [image]}]})
    with (
        pytest.raises(anthropic.BadRequestError, match="first message"),
        anthropic_sdk.messages.stream(
            **{**ASK, "messages": [{"role": "assistant", "content": "Hi"}]}
        ) as stream,
    ):
        stream.get_final_message()


def test_sdk_backend_rejection_keeps_its_status_and_message(anthropic_sdk):
    with pytest.raises(anthropic.BadRequestError, match="context") as caught:
        anthropic_sdk.messages.create(**{**ASK, "max_tokens": 5000})
    assert caught.value.body["error"]["type"] == "invalid_request_error"


# ---- end to end: the official SDK over a scripted backend (tool calls) ----------------------------------------


class ScriptedBackend:
    """An httpx transport answering /chat/completions with canned bodies or chunk lists; keeps the requests."""

    def __init__(self):
        self.requests: list[dict] = []
        self.reply: dict | None = None
        self.chunks: list | None = None

    def __call__(self, http_request: httpx.Request) -> httpx.Response:
        body = json.loads(http_request.content)
        self.requests.append(body)
        if not body["stream"]:
            return httpx.Response(200, json=self.reply)
        lines = "".join(f"data: {json.dumps(item)}\n\n" for item in self.chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, content=lines.encode(), headers={"content-type": "text/event-stream"})


@pytest.fixture(scope="module")
def scripted_sdk():
    backend = ScriptedBackend()
    app = create_app("http://backend.invalid/v1", transport=httpx.MockTransport(backend))
    with serve_in_thread(app) as url:
        yield backend, anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)


TOOL_ASK = {
    "model": "claude-test",
    "max_tokens": 64,
    "tools": [WEATHER_TOOL],
    "tool_choice": {"type": "tool", "name": "get_weather"},
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
}


def test_sdk_gets_tool_use_blocks(scripted_sdk):
    backend, sdk = scripted_sdk
    backend.reply = chat_completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        "tool_calls",
    )
    message = sdk.messages.create(**TOOL_ASK)
    [block] = message.content
    assert (block.type, block.id, block.name, block.input) == (
        "tool_use",
        "call_9",
        "get_weather",
        {"city": "Paris"},
    )
    assert message.stop_reason == "tool_use"
    sent = backend.requests[-1]
    assert sent["tools"] == [OPENAI_WEATHER_TOOL]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["logprobs"] is True
    assert sent["return_token_ids"] is True


def test_sdk_streams_a_tool_call_split_over_chunks(scripted_sdk):
    backend, sdk = scripted_sdk
    backend.chunks = [
        chunk({"role": "assistant", "content": ""}, prompt_token_ids=list(range(9))),
        chunk({"content": "Checking."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"ci'},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}),
        chunk({}, "tool_calls"),
        usage_chunk(9, 14),
    ]
    with sdk.messages.stream(**TOOL_ASK) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Checking."
    assert [block.type for block in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}
    assert final.content[1].id == "call_7"
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == ("tool_use", 9, 14)
    assert backend.requests[-1]["stream_options"] == {"include_usage": True}


def test_sdk_raises_on_a_mid_stream_backend_error(scripted_sdk):
    backend, sdk = scripted_sdk
    backend.chunks = [
        chunk({"content": "partial"}),
        {"error": {"message": "engine died", "type": "server_error"}},
    ]
    with (
        pytest.raises(anthropic.APIStatusError, match="engine died"),
        sdk.messages.stream(**TOOL_ASK) as stream,
    ):
        stream.get_final_message()
