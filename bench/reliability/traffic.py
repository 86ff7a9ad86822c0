"""Traffic for the reliability benchmarks: every request's start, end, status and Retry-After, so a
benchmark can say what clients saw second by second around a fault.

`closed_loop` keeps `concurrency` requests in flight for `seconds`; `open_loop` starts requests at a fixed
rate (the soak's "half the measured capacity") whatever the answers take. A transport error is status 0.
"""

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Outcome:
    kind: str
    started: float  # time.monotonic()
    ended: float
    status: int  # 0: no HTTP answer
    error: str = ""
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Call:
    """One request to make: kind (a label for the tables), method, path, JSON body, extra headers."""

    kind: str
    method: str
    path: str
    body: dict | None = None
    headers: dict | None = None
    stream: bool = False


async def _send(client: httpx.AsyncClient, call: Call) -> Outcome:
    started = time.monotonic()
    try:
        if call.stream:
            async with client.stream(
                call.method, call.path, json=call.body, headers=call.headers
            ) as response:
                async for _ in response.aiter_bytes():
                    pass
        else:
            response = await client.request(call.method, call.path, json=call.body, headers=call.headers)
        return Outcome(
            call.kind,
            started,
            time.monotonic(),
            response.status_code,
            retry_after=response.headers.get("retry-after"),
        )
    except httpx.HTTPError as error:
        return Outcome(call.kind, started, time.monotonic(), 0, error=type(error).__name__)


def _client(base_url: str, headers: dict, connections: int, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=timeout,
        trust_env=False,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


async def closed_loop(
    base_url: str,
    headers: dict,
    next_call: Callable[[int], Call],
    *,
    concurrency: int,
    seconds: float,
    timeout: float = 30.0,
) -> list[Outcome]:
    """`concurrency` workers, each sending its next request when the last one ends, until `seconds` pass."""
    outcomes: list[Outcome] = []
    counter = itertools.count()
    deadline = time.monotonic() + seconds
    async with _client(base_url, headers, concurrency, timeout) as client:

        async def worker():
            while time.monotonic() < deadline:
                outcomes.append(await _send(client, next_call(next(counter))))
                if outcomes[-1].status == 0:
                    await asyncio.sleep(0.05)  # a refused connection answers at once: don't spin

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


async def open_loop(
    base_url: str,
    headers: dict,
    next_call: Callable[[int], Call],
    *,
    rate: float,
    seconds: float,
    timeout: float = 30.0,
    max_in_flight: int = 256,
) -> list[Outcome]:
    """Starts `rate` requests per second for `seconds`, each on its own task (bounded by `max_in_flight`:
    a request that would exceed it is counted as status 0, "overload")."""
    outcomes: list[Outcome] = []
    tasks: set[asyncio.Task] = set()
    started = time.monotonic()
    async with _client(base_url, headers, max_in_flight, timeout) as client:
        for index in itertools.count():
            due = started + index / rate
            if due - started >= seconds:
                break
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            call = next_call(index)
            if len(tasks) >= max_in_flight:
                now = time.monotonic()
                outcomes.append(Outcome(call.kind, now, now, 0, error="overload"))
                continue
            task = asyncio.create_task(_send(client, call))
            tasks.add(task)
            task.add_done_callback(lambda done: (tasks.discard(done), outcomes.append(done.result())))
        if tasks:
            await asyncio.gather(*tasks)
    return outcomes


def statuses(outcomes: list[Outcome]) -> dict[str, int]:
    counts = Counter(
        str(outcome.status) if outcome.status else (outcome.error or "transport") for outcome in outcomes
    )
    return dict(sorted(counts.items()))


def p99_ms(outcomes: list[Outcome]) -> float | None:
    from workers.stats import percentile

    return percentile([(outcome.ended - outcome.started) * 1000 for outcome in outcomes if outcome.ok], 0.99)
