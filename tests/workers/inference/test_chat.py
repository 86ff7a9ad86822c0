import json

import pytest
from transformers import AutoTokenizer

from workers.inference.chat import ToolCall, ToolCallStreamParser, parse_assistant_text, render_chat_prompt

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_plain_text_has_no_tool_calls():
    reply = parse_assistant_text("It is sunny.")
    assert reply.content == "It is sunny."
    assert reply.tool_calls == ()


def test_one_tool_call_becomes_openai_shape():
    reply = parse_assistant_text(CALL)
    assert reply.content is None
    [call] = reply.tool_calls
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    assert call.to_openai() == {
        "id": call.id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": call.arguments},
    }


def test_text_before_and_several_calls():
    second = CALL.replace("Paris", "Oslo")
    reply = parse_assistant_text(f"Let me check.\n{CALL}\n{second}\n")
    assert reply.content == "Let me check."
    assert [json.loads(call.arguments)["city"] for call in reply.tool_calls] == ["Paris", "Oslo"]


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # broken JSON
        '<tool_call>["not", "an", "object"]</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "x", "arguments": 3}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',  # never closed
    ],
)
def test_malformed_tool_call_stays_text(text):
    reply = parse_assistant_text(text)
    assert reply.tool_calls == ()
    assert reply.content == text


def test_arguments_given_as_json_string_are_accepted():
    reply = parse_assistant_text('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert json.loads(reply.tool_calls[0].arguments) == {"a": 1}


@pytest.mark.parametrize(
    "text",
    [
        "plain words <tool no call",
        f"Checking. {CALL} done <tool_call",
        f"{CALL}\n{CALL}",
        '<tool_call>{"broken": </tool_call> tail',
    ],
)
def test_streaming_parser_matches_whole_text_parse_for_any_split(text):
    whole = parse_assistant_text(text)
    parser = ToolCallStreamParser()
    pieces = []
    for character in text:
        pieces += parser.feed(character)
    pieces += parser.finish()
    content = "".join(piece for piece in pieces if isinstance(piece, str))
    calls = [piece for piece in pieces if isinstance(piece, ToolCall)]
    assert [(call.name, call.arguments) for call in calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    assert (content.strip() if calls else content) == (whole.content or "")


def test_streaming_parser_holds_back_a_possible_tag():
    parser = ToolCallStreamParser()
    assert parser.feed("Hi <tool_") == ["Hi "]
    assert parser.feed("x") == ["<tool_x"]


def test_render_joins_text_parts_and_accepts_string_arguments(default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ],
        },
    ]
    text = render_chat_prompt(tokenizer, messages, add_generation_prompt=False)
    assert "<|im_start|>user\nHello there<|im_end|>" in text
    assert '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' in text
