"""Completions sent back to back from a few threads while something else happens to the server, bounded
in count and time, each result recorded with when it started and finished."""

import threading
import time
from dataclasses import dataclass

from tests.vllm.helpers import PROMPTS, complete
from workers.inference.client import ParsedCompletion


@dataclass(frozen=True)
class LoopRecord:
    started: float
    finished: float
    parsed: ParsedCompletion | None
    error: str | None


class RequestLoop:
    def __init__(
        self,
        client,
        model: str,
        *,
        threads: int = 2,
        max_requests: int = 400,
        max_seconds: float = 180.0,
        max_tokens: int = 8,
    ):
        self.client = client
        self.model = model
        self.max_requests = max_requests
        self.deadline = time.monotonic() + max_seconds
        self.max_tokens = max_tokens
        self.records: list[LoopRecord] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sent = 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> "RequestLoop":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    @property
    def failures(self) -> list[str]:
        return [record.error for record in self.records if record.error is not None]

    def wait_for(self, count: int, *, started_after: float = 0.0, timeout_s: float = 60.0) -> None:
        """Until `count` requests that started after `started_after` have finished."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                done = sum(1 for record in self.records if record.started >= started_after)
            if done >= count:
                return
            time.sleep(0.02)
        with self._lock:
            sent, spent = self._sent, self._sent >= self.max_requests or time.monotonic() > self.deadline
        raise TimeoutError(
            f"fewer than {count} requests finished in {timeout_s} s ({sent} sent"
            f"{', the loop had reached its bound' if spent else ''}): {self.failures[:3]}"
        )

    def _next_index(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._sent >= self.max_requests or time.monotonic() > self.deadline:
                return None
            self._sent += 1
            return self._sent

    def _run(self) -> None:
        while (index := self._next_index()) is not None:
            started = time.monotonic()
            parsed, error = None, None
            try:
                parsed = complete(
                    self.client,
                    self.model,
                    PROMPTS[index % len(PROMPTS)],
                    stream=index % 2 == 0,
                    max_tokens=self.max_tokens,
                    temperature=1.0,
                    seed=index,
                )
            except Exception as exception:  # every failure is a finding: record it, keep going
                error = f"{type(exception).__name__}: {exception}"
            with self._lock:
                self.records.append(LoopRecord(started, time.monotonic(), parsed, error))
