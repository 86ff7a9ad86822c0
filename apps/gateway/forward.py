"""The HTTP client the gateway forwards with: one pooled aiohttp session per process and event loop.

aiohttp rather than httpx on this path: profiles of the gateway under load put httpx's per-request work
(connection-pool bookkeeping above all) at most of the event loop's time, and aiohttp does the same job
for a fraction of it. Other code (health checks, replay, tests) keeps using httpx.
"""

import json

import aiohttp

CONNECT_SECONDS = 5.0
READ_SECONDS = 300.0
JSON_CONTENT = {"Content-Type": "application/json"}

_session: aiohttp.ClientSession | None = None


def backend_session() -> aiohttp.ClientSession:
    global _session
    if _session is None or _session.closed:
        _session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS),
            connector=aiohttp.TCPConnector(limit=512, limit_per_host=256, ttl_dns_cache=300),
            skip_auto_headers=("User-Agent",),
            read_bufsize=8 * 1024 * 1024,  # a first SSE chunk carries all prompt token ids on one line
        )
    return _session


def encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


async def backend_session_close() -> None:
    global _session
    if _session is not None and not _session.closed:
        await _session.close()
    _session = None
