"""OpenAI chat-completion chunks in, Anthropic Messages stream events out (pure, no I/O, no Django), by the
rules of the whole-message translation (`anthropic_response.py`): `message_start` (and a `ping`), per content
block `content_block_start`, its deltas and `content_block_stop`, then `message_delta` with the stop reason
and usage, and `message_stop`. A backend failure mid-stream is one `error` event.
"""

import json

from apps.gateway.anthropic_response import (
    message_stop_reason,
    message_usage,
    new_message_id,
    tool_call_block,
)
from apps.gateway.anthropic_wire import anthropic_error
from apps.gateway.stream_tally import StreamTally


def sse_encode(event: str, data: dict) -> bytes:
    """One server-sent event as Anthropic sends it: a named event and its JSON data."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class _PendingCall:
    __slots__ = ("id", "name", "arguments")

    def __init__(self):
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class ChatStreamToMessageEvents:
    """OpenAI chat-completion chunks in, Anthropic stream events out, for the first choice.

    Text streams as it comes. A tool call's arguments are held until the call is complete (text follows,
    or the stream ends) and then sent as one `input_json_delta`: only then can a malformed call become a
    text block, as in the non-streaming translation, instead of JSON the client cannot parse.
    `finish()` closes whatever is open and ends the message; it is idempotent. A chunk carrying an
    `error` object turns into an Anthropic `error` event and ends the stream.
    """

    sse_encode = staticmethod(sse_encode)

    def __init__(
        self,
        *,
        model: str,
        message_id: str | None = None,
        stop_sequences: list[str] | None = None,
        ping: bool = True,
    ):
        self.model = model
        self.message_id = message_id or new_message_id()
        self._stop_sequences = stop_sequences
        self._ping = ping
        self._started = False
        self._finished = False
        self._block_count = 0
        self._open: str | None = None  # type of the open block: "text" or "tool_use"
        self._calls: dict[int, _PendingCall] = {}  # by the OpenAI tool-call index, in arrival order
        self._has_tool_use = False
        self._finish_reason = None
        self._backend_stop_reason = None
        self._tally = StreamTally()  # usage, else the token ids counted (stream_tally.py)

    @property
    def finished(self) -> bool:
        return self._finished

    def feed(self, chunk: dict) -> list[tuple[str, dict]]:
        if self._finished:
            return []
        if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict) and not chunk.get("choices"):
            self._finished = True
            message = chunk["error"].get("message") or "the inference backend failed"
            return [("error", anthropic_error(500, str(message)))]
        events: list[tuple[str, dict]] = []
        first_choices = self._tally.first_choices(chunk)  # before the start: it reports the prompt's ids
        if not self._started:
            events += self._start()
        for choice in first_choices:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                events += self._flush_calls()
                if self._open != "text":
                    events += self._open_block({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": text}))
            for position, call in enumerate(delta.get("tool_calls") or []):
                self._add_call_fragment(position, call)
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
                self._backend_stop_reason = choice.get("stop_reason")
        return events

    def finish(self) -> list[tuple[str, dict]]:
        if self._finished:
            return []
        events = [] if self._started else self._start()
        events += self._flush_calls()
        events += self._close_block()
        stop_reason, stop_sequence = message_stop_reason(
            self._finish_reason, self._backend_stop_reason, self._has_tool_use, self._stop_sequences
        )
        usage = message_usage(self._tally.usage, self._tally.prompt_ids, self._tally.completion_ids)
        delta_usage = {"output_tokens": usage["output_tokens"]}
        if self._tally.usage is not None:
            delta_usage.update(
                input_tokens=usage["input_tokens"], cache_read_input_tokens=usage["cache_read_input_tokens"]
            )
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": delta_usage,
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        self._finished = True
        return events

    # ---- internals

    def _start(self) -> list[tuple[str, dict]]:
        self._started = True
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self._tally.prompt_ids,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        events = [("message_start", {"type": "message_start", "message": message})]
        if self._ping:
            events.append(("ping", {"type": "ping"}))
        return events

    def _open_block(self, block: dict) -> list[tuple[str, dict]]:
        events = self._close_block()
        self._open = block["type"]
        self._block_count += 1
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": self._block_count - 1, "content_block": block},
            )
        )
        return events

    def _close_block(self) -> list[tuple[str, dict]]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._block_count - 1})]

    def _delta(self, delta: dict) -> tuple[str, dict]:
        return (
            "content_block_delta",
            {"type": "content_block_delta", "index": self._block_count - 1, "delta": delta},
        )

    def _add_call_fragment(self, position: int, fragment: dict) -> None:
        if not isinstance(fragment, dict):
            return
        index = fragment.get("index", position)
        pending = self._calls.setdefault(index, _PendingCall())
        if isinstance(fragment.get("id"), str) and fragment["id"] and pending.id is None:
            pending.id = fragment["id"]
        function = fragment.get("function") or {}
        if isinstance(function.get("name"), str) and function["name"] and pending.name is None:
            pending.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            pending.arguments.append(arguments)
        elif isinstance(arguments, dict):
            pending.arguments.append(json.dumps(arguments, ensure_ascii=False))

    def _flush_calls(self) -> list[tuple[str, dict]]:
        events: list[tuple[str, dict]] = []
        for pending in self._calls.values():
            raw = "".join(pending.arguments)
            block = tool_call_block(pending.id, pending.name, raw)
            if block["type"] == "tool_use":
                self._has_tool_use = True
                events += self._open_block({**block, "input": {}})
                events.append(
                    self._delta({"type": "input_json_delta", "partial_json": raw if raw.strip() else "{}"})
                )
            else:
                events += self._open_block({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": block["text"]}))
            events += self._close_block()
        self._calls.clear()
        return events
