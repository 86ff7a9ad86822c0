"""What the engine hands back: per-step token events, delivered across threads, and the assembled result."""

import asyncio
import contextlib
import queue
from dataclasses import dataclass

from workers.inference.sampling import SamplingParams


@dataclass(frozen=True)
class TokenEvent:
    """One step of one choice: a sampled token (None when the choice ends without one, as on abort)."""

    choice_index: int
    token_id: int | None
    logprob: float | None  # log_softmax of the raw logits, before temperature or top_p
    top_logprobs: tuple[tuple[int, float], ...]
    policy_version: int | None
    text: str  # visible text released at this step
    finish_reason: str | None = None  # "stop", "length" or "abort" on the choice's last event
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it


@dataclass(frozen=True)
class ChoiceResult:
    index: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    policy_versions: tuple[int, ...]
    text: str
    finish_reason: str
    stop_reason: str | int | None


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    choices: tuple[ChoiceResult, ...]


class EngineFailure(RuntimeError):
    """The engine could not finish this request; the message says why."""


class ResultBuilder:
    def __init__(self, request_id: str, prompt_token_ids: tuple[int, ...], n: int):
        self._request_id = request_id
        self._prompt_token_ids = prompt_token_ids
        self._events: list[list[TokenEvent]] = [[] for _ in range(n)]

    def add(self, events: list[TokenEvent]) -> None:
        for event in events:
            self._events[event.choice_index].append(event)

    def build(self) -> GenerationResult:
        return GenerationResult(
            request_id=self._request_id,
            prompt_token_ids=self._prompt_token_ids,
            choices=tuple(_choice(index, events) for index, events in enumerate(self._events)),
        )


def _choice(index: int, events: list[TokenEvent]) -> ChoiceResult:
    # A sampled token's event carries its logprob and policy version; only an abort has none of the three.
    sampled = [
        (event.token_id, event.logprob, event.top_logprobs, event.policy_version)
        for event in events
        if event.token_id is not None and event.logprob is not None and event.policy_version is not None
    ]
    last = events[-1] if events else None
    return ChoiceResult(
        index=index,
        token_ids=tuple(token_id for token_id, _, _, _ in sampled),
        logprobs=tuple(logprob for _, logprob, _, _ in sampled),
        top_logprobs=tuple(top for _, _, top, _ in sampled),
        policy_versions=tuple(version for _, _, _, version in sampled),
        text="".join(event.text for event in events),
        finish_reason=last.finish_reason if last and last.finish_reason else "abort",
        stop_reason=last.stop_reason if last else None,
    )


class RequestStream:
    """The consumer's end of one request: iterate events asynchronously, or block for the result."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: tuple[int, ...],
        params: SamplingParams,
        loop: asyncio.AbstractEventLoop | None,
        *,
        incremental: bool = True,
    ):
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.finished = False
        self._loop = loop
        self._async_queue: asyncio.Queue | None = asyncio.Queue() if loop is not None else None
        self._sync_queue: queue.SimpleQueue = queue.SimpleQueue()
        # A consumer that only wants the result is woken once per finished choice, not once per token:
        # every wake-up costs the engine thread a round of GIL hand-offs.
        self._incremental = incremental
        self._held: list[TokenEvent] = []

    def deliver(self, item: list[TokenEvent] | EngineFailure) -> None:
        """Called on the engine thread."""
        if not self._incremental and not isinstance(item, EngineFailure):
            self._held.extend(item)
            if not any(event.finish_reason for event in item):
                return
            item, self._held = self._held, []
        if self._loop is None or self._async_queue is None:
            self._sync_queue.put(item)
            return
        with contextlib.suppress(RuntimeError):  # the consumer's event loop is gone, and so is the consumer
            self._loop.call_soon_threadsafe(self._async_queue.put_nowait, item)

    def __aiter__(self):
        return self._iterate_async()

    async def _iterate_async(self):
        remaining = self.params.n
        while remaining:
            item = await self._async_queue.get()
            remaining -= self._count_finished(item)
            yield item
        self.finished = True

    def iterate(self):
        """Blocking iteration, for a stream submitted without an event loop."""
        remaining = self.params.n
        while remaining:
            item = self._sync_queue.get()
            remaining -= self._count_finished(item)
            yield item
        self.finished = True

    def result(self) -> GenerationResult:
        builder = ResultBuilder(self.request_id, self.prompt_token_ids, self.params.n)
        for events in self.iterate():
            builder.add(events)
        return builder.build()

    async def result_async(self) -> GenerationResult:
        builder = ResultBuilder(self.request_id, self.prompt_token_ids, self.params.n)
        async for events in self:
            builder.add(events)
        return builder.build()

    @staticmethod
    def _count_finished(item) -> int:
        if isinstance(item, EngineFailure):
            raise item
        return sum(1 for event in item if event.finish_reason is not None)
