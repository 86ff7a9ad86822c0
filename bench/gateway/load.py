"""Async load generator: HTTP/1.1 keep-alive connections, per-request latency, failures counted.

A request's latency is the time from just before the client sends it to the moment its whole response
body has been read (for a streamed answer: the last SSE byte). Answers other than HTTP 200, and
transport errors, are counted as failures and left out of the latencies.

Two client engines send the same bytes over HTTP/1.1 keep-alive connections, one per concurrent worker:

- `raw` (default): a minimal asyncio protocol that writes a precomputed request and parses just enough of
  the answer (status line, Content-Length or chunked framing) to know when it is complete. On this
  project's 2-core machine it costs about 0.05-0.08 ms of CPU per request and drives the direct upstream
  at about 5,000 req/s with 32 in flight.
- `httpx`: `httpx.AsyncClient`, each worker with its own client whose pool holds one connection. It costs
  about 1 ms of CPU per request here, so on its own it saturates near 400-1,300 req/s (one client with a
  32-connection pool: about 2.3 ms per request, about 400 req/s), which is at or below the 500 req/s goal
  the benchmark must be able to show, and it takes CPU from the servers it measures.

The client's own cost is part of every figure; measure it by pointing the same functions at the upstream
directly (the "direct" figure) and subtract: added latency = proxy latency - direct latency, per
percentile.
"""

import asyncio
import json
import time
from collections import Counter
from urllib.parse import urlsplit

import httpx

from workers.stats import percentile

ENGINES = ("httpx", "raw")


class Latencies(list):
    """Seconds per successful request, in completion order; `failed` counts the rest, `errors` says why
    (`"HTTP 502"`, `"ReadTimeout"`, ...)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.errors: Counter = Counter()
        self.warmup_ok = 0  # unmeasured warm-up requests answered 200 (they reach the server all the same)
        self.warmup_failed = 0

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


def _encode(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()


def _headers(headers: dict | None) -> dict:
    return {"content-type": "application/json", **(headers or {})}


# -- engines: one kept-alive connection each ---------------------------------------------------------------


class _HttpxSession:
    def __init__(self, url: str, headers: dict, content: bytes, timeout: float):
        self._url, self._headers, self._content = url, headers, content
        self._client = httpx.AsyncClient(
            http1=True,
            http2=False,
            timeout=timeout,
            trust_env=False,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=300.0),
        )

    async def request(self) -> int:
        response = await self._client.post(self._url, content=self._content, headers=self._headers)
        return response.status_code  # post() has read the whole body

    async def aclose(self) -> None:
        await self._client.aclose()


class _RawProtocol(asyncio.Protocol):
    """Reads one HTTP/1.1 response at a time off a kept-alive connection."""

    def __init__(self):
        self.transport = None
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._reset()

    def _reset(self):
        self._buffer = bytearray()
        self._status = 0
        self._body_start = -1
        self._length = -1  # Content-Length, or -1 for chunked
        self._chunk_pos = 0
        self._keep_alive = True

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc or 'closed by peer'}"))

    def data_received(self, data):
        self._buffer += data
        try:
            if (self._body_start < 0 and not self._parse_head()) or not self._complete():
                return
        except (ValueError, IndexError) as exc:  # not HTTP/1.1 as we know it
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ValueError(f"unparsable response: {exc}"))
            self.transport.close()
            return
        if self.waiter is not None and not self.waiter.done():
            status, keep_alive = self._status, self._keep_alive
            self._reset()
            self.waiter.set_result((status, keep_alive))

    def _parse_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        self._status = int(head[0].split(" ", 2)[1])
        self._body_start = end + 4
        self._chunk_pos = self._body_start
        self._length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                self._length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                self._length = -1
            elif name == "connection" and value == "close":
                self._keep_alive = False
        return True

    def _complete(self) -> bool:
        if self._length >= 0:
            return len(self._buffer) >= self._body_start + self._length
        buffer = self._buffer
        while True:  # walk chunk headers from where the last call stopped
            line_end = buffer.find(b"\r\n", self._chunk_pos)
            if line_end < 0:
                return False
            size = int(bytes(buffer[self._chunk_pos : line_end]).split(b";", 1)[0], 16)
            if size == 0:
                return buffer.find(b"\r\n\r\n", line_end) >= 0
            next_pos = line_end + 2 + size + 2
            if len(buffer) < next_pos:
                return False
            self._chunk_pos = next_pos


class _RawSession:
    def __init__(self, url: str, headers: dict, content: bytes, timeout: float):
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError("the raw engine speaks plain http:// only")
        self._host, self._port = parts.hostname, parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(content)}"]
        lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() != "content-length"]
        self._request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + content
        self._timeout = timeout
        self._protocol: _RawProtocol | None = None

    async def request(self) -> int:
        if self._protocol is None or self._protocol.closed:
            loop = asyncio.get_running_loop()
            _, self._protocol = await loop.create_connection(_RawProtocol, self._host, self._port)
        protocol = self._protocol
        protocol.waiter = asyncio.get_running_loop().create_future()
        protocol.transport.write(self._request)
        try:
            status, keep_alive = await asyncio.wait_for(protocol.waiter, self._timeout)
        except BaseException:
            protocol.transport.close()
            self._protocol = None
            raise
        if not keep_alive:
            protocol.transport.close()
            self._protocol = None
        return status

    async def aclose(self) -> None:
        if self._protocol is not None:
            self._protocol.transport.close()


def _session(engine: str, url: str, headers: dict, content: bytes, timeout: float):
    if engine == "httpx":
        return _HttpxSession(url, headers, content, timeout)
    if engine == "raw":
        return _RawSession(url, headers, content, timeout)
    raise ValueError(f"unknown client engine {engine!r}; one of {ENGINES}")


# -- load shapes ----------------------------------------------------------------------------------------


async def _one(session, out: Latencies) -> None:
    start = time.perf_counter()
    try:
        status = await session.request()
    except (TimeoutError, httpx.HTTPError, OSError, ValueError) as exc:
        out.errors[type(exc).__name__] += 1
        return
    elapsed = time.perf_counter() - start
    if status == 200:
        out.append(elapsed)
    else:
        out.errors[f"HTTP {status}"] += 1


async def _closed_loop(sessions, n: int, max_seconds: float | None = None) -> tuple[Latencies, float]:
    out = Latencies()
    remaining = n
    start = time.perf_counter()
    deadline = start + max_seconds if max_seconds else float("inf")

    async def worker(session):
        nonlocal remaining
        while remaining > 0 and time.perf_counter() < deadline:
            remaining -= 1
            await _one(session, out)

    await asyncio.gather(*(worker(session) for session in sessions))
    return out, time.perf_counter() - start


async def run_sequential(
    url: str,
    headers: dict | None,
    body,
    n: int,
    *,
    warmup: int = 20,
    engine: str = "raw",
    timeout: float = 60.0,
    max_seconds: float | None = None,
) -> Latencies:
    """`n` requests, one at a time, over one kept-alive connection (after `warmup` unmeasured ones); with
    `max_seconds`, no new request starts after that long (fewer than `n` then)."""
    session = _session(engine, url, _headers(headers), _encode(body), timeout)
    try:
        warm = (await _closed_loop([session], warmup))[0] if warmup else Latencies()
        latencies, _ = await _closed_loop([session], n, max_seconds)
        latencies.warmup_ok, latencies.warmup_failed = len(warm), warm.failed
        return latencies
    finally:
        await session.aclose()


async def run_concurrent(
    url: str,
    headers: dict | None,
    body,
    n: int,
    concurrency: int,
    *,
    warmup: int | None = None,
    engine: str = "raw",
    timeout: float = 60.0,
    max_seconds: float | None = None,
) -> tuple[Latencies, float]:
    """`n` requests kept `concurrency` in flight: a closed loop of `concurrency` workers, each with its own
    kept-alive connection, each sending its next request when its last one is answered. Returns the
    latencies and the wall seconds of the measured part; sustained req/s = len(latencies) / wall. The
    connections are opened first by `warmup` unmeasured requests (default: 2 x concurrency). With
    `max_seconds`, no new request starts after that long; the wall time still waits for those in flight."""
    headers, content = _headers(headers), _encode(body)
    sessions = [_session(engine, url, headers, content, timeout) for _ in range(max(1, min(concurrency, n)))]
    try:
        warmup = 2 * concurrency if warmup is None else warmup
        warm = (await _closed_loop(sessions, warmup))[0] if warmup else Latencies()
        latencies, wall = await _closed_loop(sessions, n, max_seconds)
        latencies.warmup_ok, latencies.warmup_failed = len(warm), warm.failed
        return latencies, wall
    finally:
        await asyncio.gather(*(session.aclose() for session in sessions))


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds (`workers.stats.percentile`); NaN when nothing succeeded."""

    def milliseconds(fraction: float) -> float:
        seconds = percentile(latencies, fraction)
        return float("nan") if seconds is None else seconds * 1000.0

    return {"p50": milliseconds(0.5), "p99": milliseconds(0.99)}


def run_async(coroutine):
    """Run `coroutine` on uvloop when it is installed (less client overhead), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)
