"""The response parser on vLLM-shaped bodies (field layout of vLLM's OpenAI server with return_token_ids)."""

import json

import pytest

from workers.inference.client import InferenceResponseError, iter_sse_data, parse_response, parse_stream

VLLM_CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "qwen",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "logprobs": {
                "content": [
                    {"token": "<tool_call>", "logprob": -0.5, "bytes": [60], "top_logprobs": []},
                    {"token": "{", "logprob": -0.25, "bytes": [123], "top_logprobs": []},
                ]
            },
            "finish_reason": "tool_calls",
            "stop_reason": None,
            "token_ids": [151657, 90],
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    "prompt_token_ids": [1, 2, 3],
}

VLLM_CHAT_CHUNKS = [
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    },
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": [
            {
                "index": 0,
                "delta": {"content": "Let me"},
                "token_ids": [10, 11],
                "logprobs": {
                    "content": [{"token": "Let", "logprob": -1.0}, {"token": " me", "logprob": -2.0}]
                },
            }
        ],
    },
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                "token_ids": [12],
                "logprobs": {"content": [{"token": "x", "logprob": -0.5}]},
            }
        ],
    },
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                "token_ids": [13],
                "logprobs": {"content": [{"token": "y", "logprob": -0.25}]},
            }
        ],
    },
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]},
                "token_ids": [14],
                "logprobs": {"content": [{"token": "z", "logprob": -0.125}]},
                "finish_reason": "tool_calls",
            }
        ],
    },
    {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
    },
]

VLLM_COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "model": "qwen",
    "choices": [
        {
            "index": 0,
            "text": " world",
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_token_ids": [5, 6],
            "token_ids": [7],
            "logprobs": {
                "tokens": [" world"],
                "token_logprobs": [-0.75],
                "top_logprobs": [{}],
                "text_offset": [0],
            },
        }
    ],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
}


def test_vllm_chat_body():
    parsed = parse_response(VLLM_CHAT)
    assert parsed.endpoint == "chat"
    assert parsed.prompt_token_ids == (1, 2, 3)
    [choice] = parsed.choices
    assert choice.completion_token_ids == (151657, 90)
    assert choice.logprobs == (-0.5, -0.25)
    assert choice.policy_versions is None
    assert parsed.policy_version is None
    assert choice.tool_calls[0].name == "get_weather"
    assert json.loads(choice.tool_calls[0].arguments)["city"] == "Paris"
    assert choice.text is None
    assert choice.finish_reason == "tool_calls"
    assert parsed.has_token_data


def test_vllm_chat_stream_accumulates_text_tokens_and_tool_call_fragments():
    parsed = parse_stream(VLLM_CHAT_CHUNKS)
    [choice] = parsed.choices
    assert parsed.prompt_token_ids == (1, 2, 3)
    assert choice.text == "Let me"
    assert choice.completion_token_ids == (10, 11, 12, 13, 14)
    assert choice.logprobs == (-1.0, -2.0, -0.5, -0.25, -0.125)
    [call] = choice.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("t1", "get_weather", {"city": "Oslo"})
    assert choice.finish_reason == "tool_calls"
    assert parsed.usage["completion_tokens"] == 5


def test_vllm_completion_takes_prompt_ids_from_the_choice():
    parsed = parse_response(VLLM_COMPLETION)
    assert parsed.endpoint == "completions"
    assert parsed.prompt_token_ids == (5, 6)
    assert parsed.choices[0].text == " world"
    assert parsed.choices[0].logprobs == (-0.75,)


def test_missing_token_data_is_reported():
    body = {**VLLM_CHAT, "prompt_token_ids": None}
    assert not parse_response(body).has_token_data


def test_error_payloads_raise():
    with pytest.raises(InferenceResponseError, match="boom"):
        parse_response({"error": {"message": "boom", "type": "server_error", "code": None}})
    with pytest.raises(InferenceResponseError):
        parse_stream([VLLM_CHAT_CHUNKS[0], {"error": {"message": "mid-stream failure"}}])


def test_sse_lines_stop_at_done():
    lines = [
        "data: " + json.dumps(VLLM_CHAT_CHUNKS[0]),
        "",
        ": keep-alive",
        "data: [DONE]",
        'data: {"late": 1}',
    ]
    assert list(iter_sse_data(lines)) == [VLLM_CHAT_CHUNKS[0]]
