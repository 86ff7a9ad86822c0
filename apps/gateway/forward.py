"""The HTTP client the gateway forwards with: one pooled aiohttp session per process and event loop.

aiohttp rather than httpx on this path: profiles of the gateway under load put httpx's per-request work
(connection-pool bookkeeping above all) at most of the event loop's time, and aiohttp does the same job
for a fraction of it. Other code (health checks, replay, tests) keeps using httpx.

Backend addresses are tenant input (apps/inference/egress.py): `backend_url` checks the URL's form and, for an
address literal, the address before the request; `CheckedResolver` checks every address a host name resolves to
when the session connects, so nothing is connected to that the allow-list does not cover. Callers pass
`allow_redirects=False` and read bodies with `read_capped`.
"""

import socket

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver
from django.conf import settings

from apps.gateway import wire_json
from apps.inference.egress import backend_url_check_literal, check_addresses

CONNECT_SECONDS = 5.0
READ_SECONDS = 300.0
JSON_CONTENT = {"Content-Type": "application/json"}

_session: aiohttp.ClientSession | None = None


class BackendResponseTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"the inference backend's answer is too large (over {limit} bytes)")


class CheckedResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, then refuses (BackendAddressRefused) unless the allow-list
    covers every address: checked on the addresses actually connected to."""

    def __init__(self):
        self._resolver = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):
        resolved = await self._resolver.resolve(host, port, family)
        check_addresses(host=host, port=port, addresses=[entry["host"] for entry in resolved])
        return resolved

    async def close(self) -> None:
        await self._resolver.close()


def backend_url(base_url: str, path: str) -> str:
    """The URL to forward to, once its form (and address, for an address literal) is allowed."""
    backend_url_check_literal(base_url)
    return base_url + path


async def read_capped(response: aiohttp.ClientResponse) -> bytes:
    """The whole body, or BackendResponseTooLarge past AREAL_GATEWAY_MAX_RESPONSE_BYTES."""
    limit = settings.AREAL_GATEWAY_MAX_RESPONSE_BYTES
    if response.content_length is not None:
        if response.content_length > limit:
            raise BackendResponseTooLarge(limit)
        return await response.read()
    chunks, size = [], 0
    async for data in response.content.iter_chunked(64 * 1024):
        size += len(data)
        if size > limit:
            raise BackendResponseTooLarge(limit)
        chunks.append(data)
    return b"".join(chunks)


def backend_session() -> aiohttp.ClientSession:
    global _session
    if _session is None or _session.closed:
        _session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS),
            connector=aiohttp.TCPConnector(
                limit=512, limit_per_host=256, ttl_dns_cache=300, resolver=CheckedResolver()
            ),
            skip_auto_headers=("User-Agent",),
            read_bufsize=8 * 1024 * 1024,  # a first SSE chunk carries all prompt token ids on one line
        )
    return _session


def encode(body: dict) -> bytes:
    return wire_json.dumps(body)


async def backend_session_close() -> None:
    global _session
    if _session is not None and not _session.closed:
        await _session.close()
    _session = None
