"""Chat-completion chunks in, OpenAI Responses stream events out (pure, no I/O, no Django).

The sequence OpenAI sends: `response.created`, `response.in_progress`; per output item
`response.output_item.added`, then for a message `response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`, `response.content_part.done`, and for a
function call `response.function_call_arguments.delta`..., `response.function_call_arguments.done`; then
`response.output_item.done`; last `response.completed` (or `response.incomplete`, with the reason) carrying
the whole response object, the same one a non-streaming request gets. Every event has a `sequence_number`.
A backend failure mid-stream is an `error` event followed by `response.failed`.
"""

import json

from apps.gateway import responses_wire as wire
from apps.gateway.stream_tally import StreamTally


def sse_encode(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class _Item:
    __slots__ = ("index", "item", "parts")

    def __init__(self, index: int, item: dict):
        self.index, self.item, self.parts = index, item, []


class ChatStreamToResponseEvents:
    def __init__(self, response: dict):
        self.response = response  # the skeleton (responses_wire.response_skeleton)
        self.final: dict | None = None  # the finished response object, once `finish` ran
        self._sequence = 0
        self._started = False
        self._finished = False
        self._output: list[dict] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # by the chat tool-call index
        self._finish_reason = None
        self._tally = StreamTally()  # usage, else the token ids counted (stream_tally.py)

    def _event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def start(self) -> list[dict]:
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self.response),
            self._event("response.in_progress", response=self.response),
        ]

    def feed(self, chunk: dict) -> list[dict]:
        if self._finished:
            return []
        events = self.start()
        for choice in self._tally.first_choices(chunk):
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                events += self._text(text)
            for position, fragment in enumerate(delta.get("tool_calls") or []):
                if isinstance(fragment, dict):
                    events += self._call_fragment(fragment.get("index", position), fragment)
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict]:
        if self._finished:
            return []
        events = self.start()
        if not self._output and self._open is None:
            events += self._text("")  # an empty answer is still a message (responses_wire)
        events += self._close()
        self._finished = True
        self.final = wire.finish(
            self.response,
            output=self._output,
            finish_reason=self._finish_reason,
            usage_=wire.usage(self._tally.usage, self._tally.prompt_ids, self._tally.completion_ids),
        )
        kind = "response.completed" if self.final["status"] == "completed" else "response.incomplete"
        return events + [self._event(kind, response=self.final)]

    def fail(self, *, message: str, code: str) -> list[dict]:
        """The stream broke after it began: an `error` event and `response.failed`."""
        if self._finished:
            return []
        events = self.start()
        self._finished = True
        failed = {**self.response, "status": "failed", "error": {"code": code, "message": message}}
        return events + [
            self._event("error", code=code, message=message, param=None),
            self._event("response.failed", response=failed),
        ]

    # ---- internals

    def _text(self, text: str) -> list[dict]:
        events = []
        if self._open is None or self._open.item["type"] != "message":
            events += self._close()
            item = wire.message_item("", status="in_progress")
            self._open = _Item(len(self._output), item)
            events.append(self._event("response.output_item.added", output_index=self._open.index, item=item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=self._open.index,
                    content_index=0,
                    part=part,
                )
            )
        self._open.parts.append(text)
        if text:
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self._open.item["id"],
                    output_index=self._open.index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        return events

    def _call_fragment(self, index: int, fragment: dict) -> list[dict]:
        events = []
        current = self._calls.get(index)
        if current is None:
            events += self._close()
            function = fragment.get("function") or {}
            item = wire.function_call_item(fragment.get("id"), function.get("name"), "", status="in_progress")
            current = self._calls[index] = self._open = _Item(len(self._output), item)
            events.append(self._event("response.output_item.added", output_index=current.index, item=item))
        elif current is not self._open:
            return events  # a late fragment of a call already closed: arguments are not reopened
        function = fragment.get("function") or {}
        if isinstance(function.get("name"), str) and function["name"] and not current.item["name"]:
            current.item["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments, str) and arguments:
            current.parts.append(arguments)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=current.item["id"],
                    output_index=current.index,
                    delta=arguments,
                )
            )
        return events

    def _close(self) -> list[dict]:
        current, self._open = self._open, None
        if current is None:
            return []
        joined = "".join(current.parts)
        item_id, index = current.item["id"], current.index
        if current.item["type"] == "message":
            done = wire.message_item(joined, item_id=item_id)
            part = done["content"][0]
            events = [
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=joined,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
            ]
        else:
            done = {**current.item, "status": "completed", "arguments": joined}
            events = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    name=done["name"],
                    arguments=joined,
                )
            ]
        self._output.append(done)
        return events + [self._event("response.output_item.done", output_index=index, item=done)]
