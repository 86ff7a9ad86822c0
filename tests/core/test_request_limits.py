"""Request bodies on Django's paths (REST API, console, admin) are capped before Django reads them: a body
over the cap answers 413 without being read to its end (Django would otherwise spool all of it to disk
before authentication), whether it declares its length or comes chunked."""

import asyncio
import json
import select
import socket

import pytest

from areal_web.asgi import application
from tests.servers import web_server_in_thread

pytestmark = pytest.mark.django_db(transaction=True)

CHUNK = 64 * 1024


def _scope(path: str, headers: list[tuple[bytes, bytes]]):
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def _call(path: str, *, headers=(), chunks: int = 32, body: bytes | None = None):
    """Runs the ASGI application on one request whose body is `body`, or `chunks` chunks of 64 KiB (bounded,
    so that even an application that reads everything finishes). Returns (status, response body, chunks the
    application read)."""
    read = 0
    sent = []

    async def receive():
        nonlocal read
        if body is not None and not read:
            read += 1
            return {"type": "http.request", "body": body, "more_body": False}
        if body is not None or read >= chunks:
            await asyncio.sleep(3600)  # the body has ended: only a disconnect could come now
        read += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": read < chunks}

    async def send(message):
        sent.append(message)

    asyncio.run(asyncio.wait_for(application(_scope(path, list(headers)), receive, send), 30))
    start = next(message for message in sent if message["type"] == "http.response.start")
    content = b"".join(
        message.get("body", b"") for message in sent if message["type"] == "http.response.body"
    )
    return start["status"], content, read


@pytest.mark.parametrize("path", ["/api/v1/keys/", "/login/", "/django-admin/login/"])
def test_a_declared_oversized_body_is_refused_without_reading_it(path, settings):
    settings.AREAL_MAX_BODY_BYTES = 256 * 1024
    status, content, read = _call(path, headers=[(b"content-length", str(10 * 1024**3).encode())])
    assert status == 413
    assert read == 0
    if path.startswith("/api/"):
        assert json.loads(content)["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("path", ["/api/v1/trajectories/", "/login/"])
def test_a_chunked_body_is_cut_at_the_cap(path, settings):
    settings.AREAL_MAX_BODY_BYTES = 256 * 1024
    status, _, read = _call(path, headers=[(b"transfer-encoding", b"chunked")], chunks=64)
    assert status == 413
    assert read == 256 * 1024 // CHUNK + 1


def test_a_body_within_the_cap_reaches_django(settings):
    settings.AREAL_MAX_BODY_BYTES = 1024 * 1024
    status, content, _ = _call("/api/v1/keys/", body=b"{}")
    assert status == 401  # Django's own answer: no credentials
    assert json.loads(content)["error"]["code"] != "payload_too_large"


def test_imports_have_their_own_larger_cap(settings):
    settings.AREAL_MAX_BODY_BYTES = 128 * 1024
    settings.AREAL_MAX_BODY_BYTES_BY_PATH = {"/api/v1/trajectories/import/": 1024 * 1024}
    assert _call("/api/v1/trajectories/import/", chunks=4)[0] == 401
    assert _call("/api/v1/trajectories/", chunks=4)[0] == 413
    assert _call("/api/v1/trajectories/import/", chunks=32)[0] == 413


def test_a_real_server_answers_413_before_a_chunked_body_ends(settings):
    """Over a socket to uvicorn: the body never ends (no terminating chunk), yet the answer is a 413."""
    settings.AREAL_MAX_BODY_BYTES = 256 * 1024
    settings.AREAL_MAX_BODY_BYTES_BY_PATH = {}
    with web_server_in_thread() as (url, _gateway):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(
                b"POST /api/v1/trajectories/import/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
            for _ in range(6):
                if select.select([connection], [], [], 0)[0]:
                    break  # the answer came while the body was still going: stop sending
                try:
                    connection.sendall(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    break  # the server answered and closed with chunks unread: its 413 is already here
            answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413")
