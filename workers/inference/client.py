"""Engine-agnostic reading of OpenAI-compatible responses that carry token data (the embedded server's or
vLLM's `return_token_ids` fields): whole bodies or SSE chunk sequences, chat or completions, into one
frozen record. Fields a backend does not send come back as None (policy versions from vLLM, say)."""

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class ParsedToolCall:
    id: str | None
    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedChoice:
    index: int
    text: str | None
    completion_token_ids: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    policy_versions: tuple[int, ...] | None
    finish_reason: str | None
    stop_reason: str | int | None
    tool_calls: tuple[ParsedToolCall, ...]
    prompt_token_ids: tuple[int, ...] | None  # the completions endpoint reports prompt ids per choice


@dataclass(frozen=True)
class ParsedCompletion:
    id: str | None
    model: str | None
    endpoint: str  # "chat" or "completions"
    prompt_token_ids: tuple[int, ...] | None
    choices: tuple[ParsedChoice, ...]
    usage: dict | None
    policy_version: int | None

    @property
    def has_token_data(self) -> bool:
        return self.prompt_token_ids is not None and all(
            choice.completion_token_ids is not None
            and choice.logprobs is not None
            and len(choice.logprobs) == len(choice.completion_token_ids)
            for choice in self.choices
        )


class InferenceResponseError(Exception):
    def __init__(self, status: int, body):
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        super().__init__(f"inference backend answered {status}: {message or body}")
        self.status = status
        self.body = body


def parse_response(body: dict) -> ParsedCompletion:
    """A non-streaming chat.completion or text_completion body."""
    _raise_on_error(body)
    choices = tuple(_parse_choice(choice) for choice in body.get("choices", []))
    return _completion(body, choices, body.get("usage"), body.get("policy_version"))


def parse_stream(chunks: Iterable[dict]) -> ParsedCompletion:
    """The chunks of one streamed response, in order, without the final [DONE]."""
    accumulator = _StreamAccumulator()
    for chunk in chunks:
        accumulator.add(chunk)
    return accumulator.result()


def iter_sse_data(lines: Iterable[str]) -> Iterator[dict]:
    """JSON payloads from server-sent-event lines, up to `data: [DONE]`."""
    for line in lines:
        payload = _sse_payload(line)
        if payload is _DONE:
            return
        if payload is not None:
            yield payload


async def request_completion(
    client: httpx.AsyncClient, url: str, body: dict, *, headers: dict | None = None
) -> ParsedCompletion:
    """POST a chat or completions body (streaming or not) and parse what comes back."""
    if not body.get("stream"):
        response = await client.post(url, json=body, headers=headers)
        payload = _json_or_text(response)
        if response.status_code >= 400:
            raise InferenceResponseError(response.status_code, payload)
        return parse_response(payload)
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code >= 400:
            await response.aread()
            raise InferenceResponseError(response.status_code, _json_or_text(response))
        accumulator = _StreamAccumulator()
        async for chunk in _aiter_sse_data(response.aiter_lines()):
            accumulator.add(chunk)
        return accumulator.result()


async def _aiter_sse_data(lines: AsyncIterator[str]) -> AsyncIterator[dict]:
    async for line in lines:
        payload = _sse_payload(line)
        if payload is _DONE:
            return
        if payload is not None:
            yield payload


_DONE = object()


def _sse_payload(line: str):
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    return _DONE if data == "[DONE]" else json.loads(data)


def _json_or_text(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return response.text


def _raise_on_error(body: dict) -> None:
    if isinstance(body, dict) and "error" in body and "choices" not in body:
        raise InferenceResponseError(200, body)


def _endpoint(body: dict) -> str:
    return "chat" if str(body.get("object", "")).startswith("chat.") else "completions"


def _ints(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(value) for value in values)


def _parse_choice(choice: dict) -> ParsedChoice:
    message = choice.get("message")
    text = message.get("content") if message is not None else choice.get("text")
    tool_calls = tuple(
        ParsedToolCall(call.get("id"), call["function"]["name"], call["function"].get("arguments") or "")
        for call in (message or {}).get("tool_calls") or []
    )
    return ParsedChoice(
        index=choice.get("index", 0),
        text=text,
        completion_token_ids=_ints(choice.get("token_ids")),
        logprobs=_logprobs(choice.get("logprobs")),
        policy_versions=_ints(choice.get("token_policy_versions")),
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
        tool_calls=tool_calls,
        prompt_token_ids=_ints(choice.get("prompt_token_ids")),
    )


def _logprobs(logprobs: dict | None) -> tuple[float, ...] | None:
    if not logprobs:
        return None
    if logprobs.get("content") is not None:
        return tuple(float(entry["logprob"]) for entry in logprobs["content"])
    if logprobs.get("token_logprobs") is not None:
        return tuple(float(value) for value in logprobs["token_logprobs"])
    return None


def _completion(body: dict, choices: tuple[ParsedChoice, ...], usage, policy_version):
    prompt_token_ids = _ints(body.get("prompt_token_ids"))
    if prompt_token_ids is None and choices and choices[0].prompt_token_ids is not None:
        prompt_token_ids = choices[0].prompt_token_ids
    return ParsedCompletion(
        id=body.get("id"),
        model=body.get("model"),
        endpoint=_endpoint(body),
        prompt_token_ids=prompt_token_ids,
        choices=choices,
        usage=usage,
        policy_version=policy_version,
    )


class _StreamAccumulator:
    def __init__(self):
        self._first: dict | None = None
        self._prompt_token_ids: list[int] | None = None
        self._usage = None
        self._choices: dict[int, dict] = {}

    def add(self, chunk: dict) -> None:
        _raise_on_error(chunk)
        if self._first is None:
            self._first = chunk
        if chunk.get("prompt_token_ids") is not None:
            self._prompt_token_ids = list(chunk["prompt_token_ids"])
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            self._add_choice(choice)

    def _add_choice(self, choice: dict) -> None:
        state = self._choices.setdefault(
            choice.get("index", 0),
            {
                "text": [],
                "token_ids": None,
                "logprobs": None,
                "versions": None,
                "finish_reason": None,
                "stop_reason": None,
                "tool_calls": {},
                "prompt_token_ids": None,
            },
        )
        delta = choice.get("delta")
        text = (delta or {}).get("content") if delta is not None else choice.get("text")
        if text:
            state["text"].append(text)
        for call in (delta or {}).get("tool_calls") or []:
            slot = state["tool_calls"].setdefault(
                call.get("index", len(state["tool_calls"])), {"id": None, "name": "", "arguments": []}
            )
            function = call.get("function") or {}
            slot["id"] = call.get("id") or slot["id"]
            slot["name"] += function.get("name") or ""
            slot["arguments"].append(function.get("arguments") or "")
        for key, source in (("token_ids", "token_ids"), ("versions", "token_policy_versions")):
            if choice.get(source) is not None:
                state[key] = (state[key] or []) + list(choice[source])
        logprobs = _logprobs(choice.get("logprobs"))
        if logprobs is not None:
            state["logprobs"] = (state["logprobs"] or []) + list(logprobs)
        if choice.get("prompt_token_ids") is not None:
            state["prompt_token_ids"] = list(choice["prompt_token_ids"])
        if choice.get("finish_reason") is not None:
            state["finish_reason"] = choice["finish_reason"]
            state["stop_reason"] = choice.get("stop_reason")

    def result(self) -> ParsedCompletion:
        choices = tuple(
            ParsedChoice(
                index=index,
                text="".join(state["text"]) if state["text"] or not state["tool_calls"] else None,
                completion_token_ids=_ints(state["token_ids"]),
                logprobs=None if state["logprobs"] is None else tuple(state["logprobs"]),
                policy_versions=_ints(state["versions"]),
                finish_reason=state["finish_reason"],
                stop_reason=state["stop_reason"],
                tool_calls=tuple(
                    ParsedToolCall(slot["id"], slot["name"], "".join(slot["arguments"]))
                    for _, slot in sorted(state["tool_calls"].items())
                ),
                prompt_token_ids=_ints(state["prompt_token_ids"]),
            )
            for index, state in sorted(self._choices.items())
        )
        first = self._first or {}
        body = {**first, "prompt_token_ids": self._prompt_token_ids}
        return _completion(body, choices, self._usage, _policy_version(choices))


def _policy_version(choices: tuple[ParsedChoice, ...]) -> int | None:
    versions = [choice.policy_versions[-1] for choice in choices if choice.policy_versions]
    return max(versions, default=None)
