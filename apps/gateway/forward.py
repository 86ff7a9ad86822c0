"""The client the gateway forwards with (backend_http.py): one per process and event loop, keep-alive
connections per backend origin.

Backend addresses are tenant input (apps/inference/egress.py): `backend_url` checks the URL's form and, for an
address literal, the address before the request; the client checks every address a host name resolves to
before it connects, so nothing is connected to that the allow-list does not cover. Bodies are read with
`read_capped` (redirects are answers like any other: the callers refuse them).
"""

import asyncio

from django.conf import settings

from apps.gateway import wire_json
from apps.gateway.backend_http import BackendClient, BackendResponse
from apps.inference.egress import backend_url_check_literal

JSON_CONTENT = {"Content-Type": "application/json"}

_clients: dict = {}  # event loop → its client (a connection belongs to the loop that made it)


class BackendResponseTooLarge(Exception):
    def __init__(self, limit: int):
        super().__init__(f"the inference backend's answer is too large (over {limit} bytes)")


def backend_url(base_url: str, path: str) -> str:
    """The URL to forward to, once its form (and address, for an address literal) is allowed."""
    backend_url_check_literal(base_url)
    return base_url + path


async def read_capped(response: BackendResponse) -> bytes:
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


def backend_session() -> BackendClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.closed:
        for stale in [other for other in _clients if other.is_closed()]:
            del _clients[stale]
        client = _clients[loop] = BackendClient()
    return client


def encode(body: dict) -> bytes:
    return wire_json.dumps(body)


async def backend_session_close() -> None:
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.close()
