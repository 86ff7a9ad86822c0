"""Server-sent-event chunks for streamed chat and text completions (OpenAI's chunk format with vLLM's
per-chunk token ids)."""

import asyncio
import time
from typing import Any

from workers.inference.chat import ToolCall, ToolCallStreamParser
from workers.inference.responses import (
    ResponseOptions,
    TokenText,
    event_token_fields,
    new_id,
    tool_call_deltas,
    usage,
)
from workers.inference.stream import EngineFailure, RequestStream


class ChatChunks:
    """Chat completion chunks: role first, then one chunk per token per choice, the finish reason riding
    on each choice's last token, then optional usage."""

    def __init__(
        self, stream: RequestStream, options: ResponseOptions, token_text: TokenText, include_usage: bool
    ):
        self._stream = stream
        self._options = options
        self._token_text = token_text
        self._include_usage = include_usage
        self._id = new_id("chatcmpl")
        self._created = int(time.time())
        n = stream.params.n
        self._parsers = [ToolCallStreamParser() if options.parse_tool_calls else None for _ in range(n)]
        self._tool_calls_sent = [0] * n

    async def generate(self):
        for index in range(self._stream.params.n):
            first = self._chunk(
                [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
            if index == 0 and self._options.return_token_ids:
                first["prompt_token_ids"] = list(self._stream.prompt_token_ids)
            yield first
        completion_tokens = 0
        async for events in self._stream:
            for event in events:
                completion_tokens += event.token_id is not None
                yield self._chunk([self._choice(event)])
        if self._include_usage:
            yield {**self._chunk([]), "usage": usage(len(self._stream.prompt_token_ids), completion_tokens)}

    def _choice(self, event) -> dict:
        delta, finish_reason = self._delta(event), event.finish_reason
        if finish_reason == "stop" and self._tool_calls_sent[event.choice_index]:
            finish_reason = "tool_calls"
        logprobs = None
        if self._options.logprobs and event.token_id is not None:
            logprobs = {
                "content": [self._token_text.chat_entry(event.token_id, event.logprob, event.top_logprobs)]
            }
        return {
            "index": event.choice_index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "stop_reason": event.stop_reason,
            **event_token_fields(event, self._options),
        }

    def _delta(self, event) -> dict:
        parser = self._parsers[event.choice_index]
        if parser is None:
            return {"content": event.text} if event.text else {}
        pieces = parser.feed(event.text) + (parser.finish() if event.finish_reason else [])
        content = "".join(piece for piece in pieces if isinstance(piece, str))
        calls = [piece for piece in pieces if isinstance(piece, ToolCall)]
        delta: dict[str, Any] = {"content": content} if content else {}
        if calls:
            delta["tool_calls"] = tool_call_deltas(calls, self._tool_calls_sent[event.choice_index])
            self._tool_calls_sent[event.choice_index] += len(calls)
        return delta

    def _chunk(self, choices: list) -> dict:
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._options.model_name,
            "choices": choices,
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk


class CompletionChunks:
    """Completion chunks for one or more prompts, merged as their tokens arrive."""

    def __init__(
        self,
        streams: list[RequestStream],
        options: ResponseOptions,
        token_text: TokenText,
        include_usage: bool,
    ):
        self._streams = streams
        self._options = options
        self._token_text = token_text
        self._include_usage = include_usage
        self._id = new_id("cmpl")
        self._created = int(time.time())
        self._text_offsets: dict[int, int] = {}

    async def generate(self):
        merged: asyncio.Queue = asyncio.Queue()

        async def pump(prompt_index: int, stream: RequestStream):
            try:
                async for events in stream:
                    await merged.put((prompt_index, events))
            except EngineFailure as error:
                await merged.put((prompt_index, error))
            await merged.put((prompt_index, None))

        tasks = [asyncio.create_task(pump(index, stream)) for index, stream in enumerate(self._streams)]
        try:
            completion_tokens, open_streams, started = 0, len(tasks), set()
            while open_streams:
                prompt_index, item = await merged.get()
                if item is None:
                    open_streams -= 1
                    continue
                if isinstance(item, EngineFailure):
                    raise item
                for event in item:
                    completion_tokens += event.token_id is not None
                    yield self._chunk([self._choice(prompt_index, event, started)])
            if self._include_usage:
                prompt_tokens = sum(len(stream.prompt_token_ids) for stream in self._streams)
                yield {**self._chunk([]), "usage": usage(prompt_tokens, completion_tokens)}
        finally:
            for task in tasks:
                task.cancel()

    def _choice(self, prompt_index: int, event, started: set) -> dict:
        stream = self._streams[prompt_index]
        index = prompt_index * stream.params.n + event.choice_index
        choice = {
            "index": index,
            "text": event.text,
            "logprobs": None,
            "finish_reason": event.finish_reason,
            "stop_reason": event.stop_reason,
        }
        if self._options.logprobs and event.token_id is not None:
            offset = self._text_offsets.get(index, 0)
            choice["logprobs"] = self._token_text.completion_logprobs(
                [event.token_id], [event.logprob], [event.top_logprobs], text_offset=offset
            )
            self._text_offsets[index] = offset + len(choice["logprobs"]["tokens"][0])
        if self._options.return_token_ids:
            if index not in started:
                choice["prompt_token_ids"] = list(stream.prompt_token_ids)
            choice.update(event_token_fields(event, self._options))
        started.add(index)
        return choice

    def _chunk(self, choices: list) -> dict:
        chunk = {
            "id": self._id,
            "object": "text_completion",
            "created": self._created,
            "model": self._options.model_name,
            "choices": choices,
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk
