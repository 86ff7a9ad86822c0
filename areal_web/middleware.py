"""ASGI middleware at the edge, before Django (or the gateway) sees a request.

`body_limit`: Django's ASGI handler reads a whole request body into a temporary file (spooled to disk past
FILE_UPLOAD_MAX_MEMORY_SIZE) before any middleware, view or authentication runs, and DRF reads the stream,
so DATA_UPLOAD_MAX_MEMORY_SIZE does not bound it. This wrapper answers 413 at once when the declared
Content-Length is over the cap, and otherwise counts the body as Django receives it: past the cap it
hands Django a disconnect (Django then drops the request without answering) and answers 413 itself, so
at most the cap plus one chunk is ever read.
"""

import json

from django.conf import settings


def body_limit_for(path: str) -> int:
    """The cap for a path: the longest matching prefix of AREAL_MAX_BODY_BYTES_BY_PATH, else
    AREAL_MAX_BODY_BYTES."""
    best, limit = -1, settings.AREAL_MAX_BODY_BYTES
    for prefix, prefix_limit in settings.AREAL_MAX_BODY_BYTES_BY_PATH.items():
        if path.startswith(prefix) and len(prefix) > best:
            best, limit = len(prefix), prefix_limit
    return limit


def _declared_length(headers) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(scope, send, limit: int) -> None:
    message = f"request body exceeds {limit} bytes"
    if scope["path"].startswith("/api/"):
        body = json.dumps({"error": {"code": "payload_too_large", "message": message,
                                     "type": "invalid_request_error"}}).encode()
        content_type = b"application/json"
    else:
        body, content_type = (message + "\n").encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def body_limit(application):
    """Wraps an HTTP ASGI application (Django's) with the request-body cap."""

    async def limited(scope, receive, send):
        if scope["type"] != "http":
            return await application(scope, receive, send)
        limit = body_limit_for(scope["path"])
        declared = _declared_length(scope["headers"])
        if declared is not None and declared > limit:
            return await _too_large(scope, send, limit)
        received = 0
        exceeded = started = False

        async def counted_receive():
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await application(scope, counted_receive, tracked_send)
        if exceeded and not started:
            await _too_large(scope, send, limit)

    return limited
