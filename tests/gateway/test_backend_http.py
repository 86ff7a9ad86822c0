"""The gateway's forwarding client (apps/gateway/backend_http.py) against small servers on loopback that answer
as a backend would, and as a broken one does: keep-alive reuse, answers by length, in chunks, by lines and
compressed, an idle connection the server closed, a connection lost mid-answer, an answer that is not HTTP, slow
answers, and a host name whose address the allow-list does not cover (refused before any connection)."""

import asyncio
import gzip
import json

import pytest

from apps.gateway import backend_http
from apps.gateway.backend_http import BackendClient, BackendConnectFailed, BackendTransportFailed
from apps.inference.egress import BackendAddressRefused

ANSWER = json.dumps({"choices": [{"message": {"content": "hello"}}]}).encode()


def whole(body: bytes = ANSWER, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def chunked(*parts: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


class Backend:
    """A loopback server: each connection reads requests (head and Content-Length body) and answers each with
    `answer(request_number, head)`: bytes to send, or a callable `async (writer) -> bool` (False: close)."""

    def __init__(self, answer):
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc_info):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                answer = self.answer(len(self.requests), head)
                if callable(answer):
                    if not await answer(writer):
                        break
                else:
                    writer.write(answer)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def loopback_allowed(settings):
    settings.AREAL_BACKEND_ALLOWED_HOSTS = ["127.0.0.1:*"]


@pytest.fixture
async def client():
    found = BackendClient()
    yield found
    await found.close()


async def post(client, url, body=b"{}", headers=None):
    async with client.post(
        url + "/v1/chat/completions", data=body, headers=headers or {"Content-Type": "application/json"}
    ) as response:
        return response.status, await response.read()


async def test_requests_reuse_one_keep_alive_connection_and_carry_host_length_and_headers(
    loopback_allowed, client
):
    async with Backend(lambda number, head: whole()) as backend:
        for _ in range(3):
            assert await post(client, backend.url, b'{"a":1}', {"Authorization": "Bearer k"}) == (200, ANSWER)
    assert backend.connections == 1
    head, _, body = backend.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"Host: {backend.url.removeprefix('http://')}".encode() in lines
    assert b"Authorization: Bearer k" in lines
    assert b"Content-Length: 7" in lines
    assert body == b'{"a":1}'


async def test_a_chunked_stream_is_read_line_by_line_and_its_connection_reused(loopback_allowed, client):
    events = [b'data: {"n": 1}\n\n', b'data: {"n"', b": 2}\n\ndata: [DONE]\n\n"]
    async with Backend(lambda number, head: chunked(*events)) as backend:
        for _ in range(2):
            async with client.post(backend.url + "/v1/chat/completions", data=b"{}") as response:
                assert response.status == 200
                assert response.content_length is None
                lines = [line async for line in response.content]
            assert lines == [b'data: {"n": 1}\n', b"\n", b'data: {"n": 2}\n', b"\n", b"data: [DONE]\n", b"\n"]
    assert backend.connections == 1


async def test_reading_part_of_an_answer_and_in_chunks(loopback_allowed, client):
    body = bytes(range(256)) * 10
    async with Backend(lambda number, head: chunked(body[:1000], body[1000:])) as backend:
        async with client.post(backend.url + "/v1/x", data=b"") as response:
            assert await response.content.read(10) == body[:10]
            parts = [part async for part in response.content.iter_chunked(700)]
        assert [len(part) for part in parts] == [700, 700, 700, 450]
        assert b"".join(parts) == body[10:]
        async with client.post(backend.url + "/v1/x", data=b"") as response:
            assert (
                await response.content.read(5) == body[:5]
            )  # the rest left unread: the connection is closed
        assert await post(client, backend.url) == (200, body)
    assert backend.connections == 2


async def test_a_compressed_answer_is_decompressed(loopback_allowed, client):
    packed = gzip.compress(ANSWER)
    async with Backend(lambda number, head: whole(packed, "Content-Encoding: gzip\r\n")) as backend:
        assert await post(client, backend.url) == (200, ANSWER)


async def test_an_idle_connection_the_backend_closed_is_replaced_and_the_request_answered(
    loopback_allowed, client
):
    async def answer_then_close(writer):
        writer.write(whole())
        await writer.drain()
        return False  # the server closes the kept-alive connection after its answer

    async with Backend(lambda number, head: answer_then_close) as backend:
        assert await post(client, backend.url) == (200, ANSWER)
        await asyncio.sleep(0.05)
        assert await post(client, backend.url) == (200, ANSWER)
    assert backend.connections == 2
    assert len(backend.requests) == 2


async def test_a_connection_lost_mid_answer_is_a_transport_failure_and_not_sent_again(
    loopback_allowed, client
):
    async def half(writer):
        writer.write(whole()[:-5])
        await writer.drain()
        return False

    async with Backend(lambda number, head: half) as backend:
        with pytest.raises(BackendTransportFailed, match="closed the connection"):
            await post(client, backend.url)
    assert len(backend.requests) == 1


async def test_an_answer_that_is_not_http_is_a_transport_failure(loopback_allowed, client):
    async with Backend(lambda number, head: b"SSH-2.0-OpenSSH\r\n\r\n") as backend:
        with pytest.raises(BackendTransportFailed, match="not HTTP"):
            await post(client, backend.url)


async def test_an_error_status_and_a_redirect_are_answers(loopback_allowed, client):
    redirect = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n"
    )
    answers = {1: redirect, 2: whole(b'{"error": {"message": "no"}}').replace(b"200 OK", b"400 Bad Request")}
    async with Backend(lambda number, head: answers[number]) as backend:
        assert await post(client, backend.url) == (307, b"")
        assert await post(client, backend.url) == (400, b'{"error": {"message": "no"}}')
    assert len(backend.requests) == 2  # the redirect was not followed


async def test_a_slow_answer_times_out(loopback_allowed, client, monkeypatch):
    monkeypatch.setattr(backend_http, "READ_SECONDS", 0.2)

    async def silent(writer):
        await asyncio.sleep(1)
        return False

    async with Backend(lambda number, head: silent) as backend:
        with pytest.raises(TimeoutError):
            await post(client, backend.url)


async def test_nothing_listening_is_a_connect_failure(loopback_allowed, client):
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(BackendConnectFailed, match="could not connect"):
        await post(client, f"http://127.0.0.1:{port}")


async def test_a_host_name_whose_address_is_not_allowed_is_refused_before_connecting(settings, client):
    async with Backend(lambda number, head: whole()) as backend:
        port = backend.url.rsplit(":", 1)[1]
        settings.AREAL_BACKEND_ALLOWED_HOSTS = ["127.0.0.1:1"]  # loopback, but not this port
        with pytest.raises(BackendAddressRefused):
            await post(client, f"http://localhost:{port}")
        settings.AREAL_BACKEND_ALLOWED_HOSTS = [f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"]
        assert await post(client, f"http://localhost:{port}") == (200, ANSWER)
    assert backend.connections == 1  # the refused request made none


async def test_a_line_break_in_a_header_or_a_space_in_the_path_is_refused_before_sending(
    loopback_allowed, client
):
    async with Backend(lambda number, head: whole()) as backend:
        with pytest.raises(BackendConnectFailed, match="line break"):
            await post(client, backend.url, headers={"Authorization": "Bearer k\r\nX-Injected: 1"})
        with pytest.raises(BackendConnectFailed, match="space or a control character"):
            await post(client, backend.url + "/a b")
    assert backend.requests == []


async def test_a_line_longer_than_many_reads_arrives_whole(loopback_allowed, client):
    line = b"data: " + b"7," * 400_000 + b"\n"
    parts = [line[index : index + 1000] for index in range(0, len(line), 1000)]
    backend = Backend(lambda number, head: chunked(*parts, b"\n", b"data: [DONE]\n\n"))
    async with backend, client.post(backend.url + "/v1/chat/completions", data=b"{}") as response:
        lines = [got async for got in response.content]
    assert lines == [line, b"\n", b"data: [DONE]\n", b"\n"]


async def test_the_context_length_probe_gives_up_on_a_silent_backend(loopback_allowed, monkeypatch):
    """The probe bounds its own wait (caps.PROBE_SECONDS): a backend that never answers `/v1/models` leaves the
    context length unknown, and the reserved cap is forwarded as it is."""
    from types import SimpleNamespace

    from apps.gateway import caps

    monkeypatch.setattr(caps, "PROBE_SECONDS", 0.2)

    async def silent(writer):
        await asyncio.sleep(5)
        return False

    async with Backend(lambda number, head: silent) as backend:
        served = SimpleNamespace(base_url=backend.url, served_model="silent-model")
        started = asyncio.get_running_loop().time()
        assert await caps._probe_context_length(served, None) is None
        assert asyncio.get_running_loop().time() - started < 3
    assert backend.requests[0].startswith(b"GET /v1/models ")
