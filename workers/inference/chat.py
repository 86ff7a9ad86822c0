"""Chat prompts in, tool calls out: render messages with the model's chat template and turn
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` spans back into OpenAI tool calls.

A chat template is a program (jinja, run in transformers' sandbox, which bounds `range` but not time): any
template other than the project's own (a tenant's, an imported model's) is stopped once one render has run
RENDER_SECONDS, so a template that loops for hours on some conversation fails that request (or that check)
instead of holding the server. A request's `chat_template_kwargs` are variables for the template; they can
name neither another template nor the render's own arguments."""

import contextlib
import json
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from workers.inference.chat_template import CHAT_TEMPLATE

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
RENDER_SECONDS = 2.0  # one render of a template other than the project's own, at most
# apply_chat_template's own arguments: never taken from a request's chat_template_kwargs.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
_TEMPLATE_CODE = "<template>"  # the file name of the code jinja compiles a template from a string to


class ChatTemplateTimeout(ValueError):
    """A chat template ran past its time on one conversation and was stopped."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, serialized, as OpenAI sends it

    def to_openai(self, index: int | None = None) -> dict:
        call = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return call if index is None else {"index": index, **call}


@dataclass(frozen=True)
class AssistantReply:
    content: str | None
    tool_calls: tuple[ToolCall, ...]


def render_chat_prompt(
    tokenizer, messages, *, tools=None, add_generation_prompt=True, template_kwargs=None, chat_template=None
) -> str:
    """The prompt text of `messages` under the tokenizer's chat template, or under `chat_template` (a
    candidate template being checked before it is stored, workers/models/templates.py). `template_kwargs`
    are the template's variables (ValueError when one names a render argument, such as `chat_template`). A
    template other than the project's own is stopped after RENDER_SECONDS (ChatTemplateTimeout)."""
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError("this model has no chat template; use /v1/completions instead")
    reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(template_kwargs or {}))
    if reserved:
        raise ValueError(f"chat_template_kwargs may not set {', '.join(reserved)}")
    template_kwargs = dict(template_kwargs or {})
    if chat_template:
        template_kwargs["chat_template"] = chat_template
    with _time_bound(None if template == CHAT_TEMPLATE else RENDER_SECONDS):
        return tokenizer.apply_chat_template(
            [_normalize_message(message) for message in messages],
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **template_kwargs,
        )


@contextlib.contextmanager
def _time_bound(seconds: float | None) -> Iterator[None]:
    """Stops the template's code once `seconds` have passed: a trace function on the lines of the code jinja
    compiled the template to (only there: the rest runs untraced) raises ChatTemplateTimeout. This thread's
    previous trace function (a coverage tool's) is put back after."""
    if seconds is None:
        yield
        return
    deadline = time.monotonic() + seconds

    def in_template(frame, event, arg):
        if time.monotonic() > deadline:
            raise ChatTemplateTimeout(f"the chat template ran longer than {seconds:g} s and was stopped")
        return in_template

    def on_call(frame, event, arg):
        return in_template if frame.f_code.co_filename == _TEMPLATE_CODE else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def _normalize_message(message: dict) -> dict:
    # Templates expect string content; OpenAI clients may send content parts or None.
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    normalized = {**message, "content": content or ""}
    if message.get("tool_calls"):
        normalized["tool_calls"] = [_arguments_as_object(call) for call in message["tool_calls"]]
    return normalized


def _arguments_as_object(call: dict) -> dict:
    function = dict(call.get("function", {}))
    if isinstance(function.get("arguments"), str):
        with contextlib.suppress(json.JSONDecodeError):  # else rendered verbatim by the template
            function["arguments"] = json.loads(function["arguments"])
    return {**call, "function": function}


def parse_tool_call(body: str) -> ToolCall | None:
    """The tool call inside one <tool_call> span, or None when it is not a JSON object with a name."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"]:
        return None
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(
        id=new_tool_call_id(), name=payload["name"], arguments=json.dumps(arguments, ensure_ascii=False)
    )


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_assistant_text(text: str) -> AssistantReply:
    """Split generated text into content and tool calls; malformed spans stay in the content as text."""
    parser = ToolCallStreamParser()
    pieces = parser.feed(text) + parser.finish()
    content = "".join(piece for piece in pieces if isinstance(piece, str))
    tool_calls = tuple(piece for piece in pieces if isinstance(piece, ToolCall))
    if tool_calls:
        content = content.strip()
    return AssistantReply(content=content or None, tool_calls=tool_calls)


class ToolCallStreamParser:
    """Feeds on text deltas and yields content strings and complete ToolCalls in order.

    Text that might be the start of a <tool_call> tag is held back until it is decided; whitespace
    around tool calls is dropped, as a tool-calling reply has no content of its own.
    """

    def __init__(self):
        self._buffer = ""
        self._inside_call = False
        self._seen_call = False

    def feed(self, delta: str) -> list:
        self._buffer += delta
        pieces: list = []
        while True:
            if self._inside_call:
                end = self._buffer.find(TOOL_CALL_END)
                if end < 0:
                    return pieces
                body, self._buffer = self._buffer[:end], self._buffer[end + len(TOOL_CALL_END) :]
                self._inside_call = False
                call = parse_tool_call(body.strip())
                if call is None:
                    pieces.append(TOOL_CALL_START + body + TOOL_CALL_END)
                else:
                    self._seen_call = True
                    pieces.append(call)
                continue
            start = self._buffer.find(TOOL_CALL_START)
            if start >= 0:
                self._emit_text(pieces, self._buffer[:start])
                self._buffer = self._buffer[start + len(TOOL_CALL_START) :]
                self._inside_call = True
                continue
            keep = _partial_tag_length(self._buffer)
            text = self._buffer[: len(self._buffer) - keep]
            if self._seen_call and not text.strip():
                return pieces  # wait: it is either separation between calls or leads into real text
            self._emit_text(pieces, text)
            self._buffer = self._buffer[len(text) :]
            return pieces

    def finish(self) -> list:
        pieces: list = []
        remainder = (TOOL_CALL_START if self._inside_call else "") + self._buffer
        self._buffer, self._inside_call = "", False
        if remainder.strip() or not self._seen_call:
            self._emit_text(pieces, remainder)
        return pieces

    def _emit_text(self, pieces: list, text: str) -> None:
        if self._seen_call:
            text = text.strip() and text
        if text:
            pieces.append(text)


def _partial_tag_length(text: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of the tool-call start tag."""
    for length in range(min(len(TOOL_CALL_START) - 1, len(text)), 0, -1):
        if TOOL_CALL_START.startswith(text[-length:]):
            return length
    return 0
