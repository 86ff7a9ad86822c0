"""The HTTP/1.1 client the gateway forwards with: keep-alive connections per backend origin, answers parsed by
httptools (the parser uvicorn serves with), on the event loop of the process.

Why not a general client: on the gateway's path the client is most of what a forward costs. aiohttp's post of
a chat request to an instant upstream costs 3.75x the CPU and 2.3x the wall time of an httptools protocol
doing the same exchange (bench/gateway/client_cost.py), and httpx more than aiohttp. This client does only what
a forward needs: one request at a time per connection, a body given whole, the answer read whole, by lines
(server-sent events) or by chunks; plain HTTP and TLS (verified, with SNI); no redirects (a 3xx is an answer
like any other), no cookies, no proxies from the environment, no compression asked for (a compressed answer
sent anyway is decompressed).

Addresses (apps/inference/egress.py): a host name is resolved here and every address it resolves to is checked
against the allow-list (`check_addresses`, which raises BackendAddressRefused) before a connection is made, to
the checked address; resolutions are kept `DNS_SECONDS`. An address literal is checked the same way.

Errors: TimeoutError for a connect or a read that takes too long; BackendConnectFailed when no connection could
be made; BackendTransportFailed for a connection lost or an answer that is not HTTP. An idle connection that the
backend closed is noticed when the next request gets no byte of answer on it: that request is sent once more on
a new connection (nothing was answered on the old one).
"""

import asyncio
import re
import socket
import ssl
import time
import zlib
from collections import deque
from urllib.parse import urlsplit

import httptools

from apps.gateway import wire_json
from apps.inference.egress import check_addresses

CONNECT_SECONDS = 5.0
READ_SECONDS = 300.0
IDLE_SECONDS = (
    4.0  # under the 5 s keep-alive of uvicorn (vLLM's server, the embedded one): reuse before it closes
)
DNS_SECONDS = 300.0
CONNECTIONS_PER_ORIGIN = 256  # at once, to one scheme://host:port; more requests wait for one
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # not in a request target or a header name (no header injection)
PAUSE_BYTES = 4 * 1024 * 1024  # answer bytes buffered and not yet read: stop reading the socket until read


class BackendTransportFailed(Exception):
    """The connection broke, or the backend's answer is not HTTP/1.1."""


class BackendConnectFailed(BackendTransportFailed):
    """No connection could be made to the backend."""


class _Origin:
    __slots__ = ("connections", "host", "idle", "port", "scheme")

    def __init__(self, scheme: str, host: str, port: int):
        self.scheme, self.host, self.port = scheme, host, port
        self.idle: deque = deque()  # (_Connection, idle since)
        self.connections = asyncio.Semaphore(CONNECTIONS_PER_ORIGIN)


class _Connection(asyncio.Protocol):
    """One connection; one exchange at a time, its answer fed to `response`."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: BackendResponse | None = None
        self.lost = False
        self.reading_paused = False

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(BackendTransportFailed(f"the backend's answer is not HTTP/1.1 ({error})"))
            self.close()

    def connection_lost(self, exc) -> None:
        self.lost = True
        response = self.response
        if response is not None and not response.done:
            if response.status and response.until_close:
                response.finish(reusable=False)  # a body delimited by the end of the connection
            else:
                response.fail(BackendTransportFailed("the backend closed the connection"), any_byte=False)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            response.headers.clear()
            return
        response.begin(status)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        if response is not None and response.status:
            response.finish(reusable=self.parser.should_keep_alive())

    # the client's side
    def _fail(self, error: Exception) -> None:
        if self.response is not None and not self.response.done:
            self.response.fail(error)

    def pause(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.lost:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.reading_paused and self.transport is not None and not self.lost:
            self.reading_paused = False
            self.transport.resume_reading()

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class BackendResponse:
    """A backend's answer: `status`, `headers` (names in lower case), `content_length`; the body through `read`,
    `json`, or `content` (this object): `async for line in response.content` (each line with its b"\\n"),
    `content.read(n)`, `content.iter_chunked(n)`."""

    def __init__(self, connection: _Connection):
        self._connection = connection
        self.status = 0
        self.headers: dict[str, str] = {}
        self.content_length: int | None = None
        self.until_close = False  # no length and not chunked: the body ends with the connection
        self.done = False
        self.reusable = False
        self.any_byte = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._error: Exception | None = None
        self._decoder = None
        self._head = asyncio.get_running_loop().create_future()
        self._wakeup: asyncio.Future | None = None

    @property
    def content(self) -> "BackendResponse":
        return self

    # fed by the connection
    def begin(self, status: int) -> None:
        self.status, self.any_byte = status, True
        length = self.headers.get("content-length")
        self.content_length = int(length) if length and length.isdigit() else None
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.until_close = self.content_length is None and not chunked and status not in (204, 304)
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32 if "gzip" in encoding else zlib.MAX_WBITS)
        if not self._head.done():
            self._head.set_result(None)

    def feed(self, data: bytes) -> None:
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error as error:
                self.fail(BackendTransportFailed(f"the backend's compressed answer is corrupt ({error})"))
                self._connection.close()
                return
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered > PAUSE_BYTES:
                self._connection.pause()
            self._wake()

    def finish(self, *, reusable: bool) -> None:
        if self._decoder is not None:
            rest = self._decoder.flush()
            if rest:
                self._chunks.append(rest)
                self._buffered += len(rest)
        self.done, self.reusable = True, reusable
        self._wake()

    def fail(self, error: Exception, *, any_byte: bool = True) -> None:
        self._error, self.done = error, True
        self.any_byte = self.any_byte or (any_byte and bool(self.status))
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: a failure before the head is raised by `head`, not logged
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    # read by the caller
    async def head(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            await self._head

    async def _next(self, timeout: float = READ_SECONDS) -> bytes | None:
        """The next buffered bytes, waiting for them; None at the end of the body."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.done:
                return None
            self._wakeup = asyncio.get_running_loop().create_future()
            async with asyncio.timeout(timeout):
                await self._wakeup
        data = self._chunks.popleft()
        self._buffered -= len(data)
        if self._buffered <= PAUSE_BYTES // 2:
            self._connection.resume()
        return data

    def _unread(self, data: bytes) -> None:
        if data:
            self._chunks.appendleft(data)
            self._buffered += len(data)

    async def read(self, n: int = -1) -> bytes:
        """The rest of the body (`n` < 0), or up to `n` bytes of it (fewer only at its end)."""
        parts, size = [], 0
        while n < 0 or size < n:
            data = await self._next()
            if data is None:
                break
            if n >= 0 and size + len(data) > n:
                self._unread(data[n - size :])
                data = data[: n - size]
            parts.append(data)
            size += len(data)
        return b"".join(parts)

    async def json(self):
        return wire_json.loads(await self.read())

    async def iter_chunked(self, n: int):
        while (data := await self.read(n)) != b"":
            yield data

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        """Each line of the body; a line that spans many reads (a first chunk with every prompt token id) is
        joined once, not copied again at each read."""
        partial: list[bytes] = []
        while (data := await self._next()) is not None:
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                if partial:
                    partial.append(data[start : end + 1])
                    yield b"".join(partial)
                    partial = []
                else:
                    yield data[start : end + 1]
                start = end + 1
            if start < len(data):
                partial.append(data[start:])
        if partial:
            yield b"".join(partial)


class _Exchange:
    """`async with client.post(...) as response`: the answer's head received on enter; the connection back in
    its pool on exit when the body was read to its end on a keep-alive connection, closed otherwise."""

    def __init__(self, client, method: str, url: str, data: bytes | None, headers):
        self._client, self._method, self._url = client, method, url
        self._data, self._headers = data, headers
        self._origin: _Origin | None = None
        self._connection: _Connection | None = None
        self._response: BackendResponse | None = None

    async def __aenter__(self) -> BackendResponse:
        self._origin, target = self._client.origin(self._url)
        await self._origin.connections.acquire()
        try:
            self._connection, self._response = await self._client.send(
                self._origin, self._method, target, self._data, self._headers
            )
        except BaseException:
            self._origin.connections.release()
            raise
        return self._response

    async def __aexit__(self, exc_type, exc, tb):
        self._give_back()
        return False

    def _give_back(self) -> None:
        response, connection, origin = self._response, self._connection, self._origin
        if origin is None:
            return
        origin.connections.release()
        if response is None or connection is None:
            return
        connection.response = None
        whole = response.done and response.reusable and response._error is None and not response._chunks
        if whole and connection.usable():
            origin.idle.append((connection, time.monotonic()))
        else:
            connection.close()  # mid-body (the caller stopped reading), failed, or not keep-alive


class BackendClient:
    def __init__(self):
        self._origins: dict[tuple[str, str, int], _Origin] = {}
        self._resolved: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._tls: ssl.SSLContext | None = None
        self.closed = False

    def post(self, url: str, *, data: bytes, headers: dict | None = None):
        return _Exchange(self, "POST", url, data, headers)

    def get(self, url: str, *, headers: dict | None = None):
        return _Exchange(self, "GET", url, None, headers)

    def origin(self, url: str) -> tuple[_Origin, str]:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise BackendConnectFailed(f"not an http(s) URL: {url[:200]}")
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, parts.hostname, port)
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = _Origin(scheme, parts.hostname, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return origin, target

    async def send(self, origin: _Origin, method: str, target: str, data, headers):
        """Sends the request on an idle connection of the origin, or a new one; the connection and the answer
        once its head arrived. A reused connection that ends without a byte of answer is replaced once."""
        host_header = origin.host if ":" not in origin.host else f"[{origin.host}]"
        if origin.port != (443 if origin.scheme == "https" else 80):
            host_header += f":{origin.port}"
        if _UNSAFE.search(target):
            raise BackendConnectFailed("the backend URL's path holds a space or a control character")
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {host_header}\r\n"]
        for name, value in (headers or {}).items():
            if _UNSAFE.search(name) or "\r" in str(value) or "\n" in str(value):
                raise BackendConnectFailed(
                    f"the header {name[:40]!r} holds a line break or a control character"
                )
            lines.append(f"{name}: {value}\r\n")
        body = data or b""
        if method != "GET" or body:
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        request = "".join(lines).encode("latin-1") + body
        for attempt in (0, 1):
            connection = self._idle(origin) if attempt == 0 else None
            reused = connection is not None
            if connection is None:
                connection = await self._connect(origin)
            response = BackendResponse(connection)
            connection.response = response
            connection.transport.write(request)
            try:
                await response.head(READ_SECONDS)
            except BackendTransportFailed:
                connection.response = None
                connection.close()
                if reused and not response.any_byte:
                    continue
                raise
            except BaseException:
                connection.response = None
                connection.close()
                raise
            return connection, response
        raise AssertionError("unreachable")

    def _idle(self, origin: _Origin) -> _Connection | None:
        now = time.monotonic()
        while origin.idle:
            connection, since = origin.idle.pop()  # the most recent: the least likely closed by the server
            if connection.usable() and now - since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self, origin: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        addresses = await self._addresses(origin.host, origin.port)
        tls = None
        if origin.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        last: Exception | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    _, connection = await loop.create_connection(
                        _Connection,
                        address,
                        origin.port,
                        ssl=tls,
                        server_hostname=origin.host if tls else None,
                    )
                return connection
            except TimeoutError:
                raise
            except (OSError, ssl.SSLError) as error:
                last = error
        raise BackendConnectFailed(f"could not connect to {origin.host}:{origin.port} ({last})")

    async def _addresses(self, host: str, port: int) -> list[str]:
        """Every address of `host`, each allowed by the allow-list (else BackendAddressRefused)."""
        key = (host, port)
        cached = self._resolved.get(key)
        if cached is not None and cached[0] > time.monotonic():
            addresses = cached[1]
        else:
            try:
                found = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
            except OSError as error:
                raise BackendConnectFailed(f"could not resolve {host} ({error})") from None
            addresses = list(dict.fromkeys(entry[4][0] for entry in found))
            if len(self._resolved) > 10_000:
                self._resolved.clear()
            self._resolved[key] = (time.monotonic() + DNS_SECONDS, addresses)
        check_addresses(host=host, port=port, addresses=addresses)
        return addresses

    async def close(self) -> None:
        self.closed = True
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop()[0].close()
        self._origins.clear()
