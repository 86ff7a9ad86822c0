"""Chat prompts in, tool calls out: render messages with the model's chat template and turn
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` spans back into OpenAI tool calls."""

import contextlib
import json
import uuid
from dataclasses import dataclass

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"


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
    candidate template being checked before it is stored, workers/models/templates.py)."""
    if not (chat_template or getattr(tokenizer, "chat_template", None)):
        raise ValueError("this model has no chat template; use /v1/completions instead")
    if chat_template:
        template_kwargs = {**(template_kwargs or {}), "chat_template": chat_template}
    return tokenizer.apply_chat_template(
        [_normalize_message(message) for message in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **(template_kwargs or {}),
    )


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
