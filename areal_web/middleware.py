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
from django.dispatch import receiver
from django.test.signals import setting_changed


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
        body = json.dumps(
            {"error": {"code": "payload_too_large", "message": message, "type": "invalid_request_error"}}
        ).encode()
        content_type = b"application/json"
    else:
        body, content_type = (message + "\n").encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
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
        return None

    return limited


def _header(scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def gateway_allowed_hosts() -> list[str]:
    """DJANGO_ALLOWED_HOSTS (with Django's DEBUG defaults when empty), plus the host of AREAL_GATEWAY_URL,
    the address evaluation workers call the gateway at (often an internal name)."""
    from urllib.parse import urlsplit

    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    internal = urlsplit(settings.AREAL_GATEWAY_URL).hostname
    if internal:
        allowed.append(f"[{internal}]" if ":" in internal else internal)
    return allowed


# Per process, the Host verdicts, the header set (by HTTPS or not) and the proxy's HTTPS header: all follow from
# settings alone, and the gateway's hot path should not recompute them per request. Cleared when a setting changes.
_edge_hosts: dict[str, bool] = {}
_edge_headers: dict[bool, list[tuple[bytes, bytes]]] = {}
_edge_proxy: dict[str, tuple[bytes, str] | None] = {}


def _proxy_ssl_header() -> tuple[bytes, str] | None:
    """SECURE_PROXY_SSL_HEADER as (the header's name on the wire, its secure value), read once per process
    (a missing setting costs an AttributeError on every read of the lazy settings)."""
    if "proxy" not in _edge_proxy:
        proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        if proxy_header:
            meta_name, secure_value = proxy_header
            _edge_proxy["proxy"] = (
                meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode(),
                secure_value,
            )
        else:
            _edge_proxy["proxy"] = None
    return _edge_proxy["proxy"]


def _arrived_over_https(scope) -> bool:
    if scope.get("scheme") == "https":
        return True
    proxy_header = _proxy_ssl_header()
    if proxy_header:
        header, secure_value = proxy_header
        return _header(scope, header).split(",")[0].strip() == secure_value
    return False


def _security_headers(scope) -> list[tuple[bytes, bytes]]:
    """What Django's SecurityMiddleware adds to its answers, for the gateway's."""
    headers = []
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        policy = policy if isinstance(policy, str) else ",".join(policy)
        headers.append((b"referrer-policy", policy.encode()))
    if settings.SECURE_HSTS_SECONDS and _arrived_over_https(scope):
        value = f"max-age={settings.SECURE_HSTS_SECONDS}"
        if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
            value += "; includeSubDomains"
        if settings.SECURE_HSTS_PRELOAD:
            value += "; preload"
        headers.append((b"strict-transport-security", value.encode()))
    return headers


@receiver(setting_changed, dispatch_uid="areal_web.middleware.edge_caches")
def _forget_edge_caches(**kwargs) -> None:
    _edge_hosts.clear()
    _edge_headers.clear()
    _edge_proxy.clear()


def gateway_edge(application, *, is_gateway_path):
    """For HTTP requests on the gateway's paths (which never pass through Django's middleware): refuses a
    Host header that is not allowed (400 in the client's error shape; DNS rebinding, poisoned absolute
    URLs) and adds the security headers to every answer. Other paths go on untouched: Django checks those."""
    from django.http.request import split_domain_port, validate_host

    from apps.gateway.errors import GatewayError

    async def edge(scope, receive, send):
        if scope["type"] != "http" or not is_gateway_path(scope):
            return await application(scope, receive, send)
        host = _header(scope, b"host")
        if not host and scope.get("server"):
            host = f"{scope['server'][0]}:{scope['server'][1]}"
        https = _arrived_over_https(scope)
        extra = _edge_headers.get(https)
        if extra is None:
            extra = _edge_headers[https] = _security_headers(scope)
        allowed = _edge_hosts.get(host)
        if allowed is None:
            domain, _ = split_domain_port(host)
            allowed = bool(domain) and validate_host(domain, gateway_allowed_hosts())
            if len(_edge_hosts) < 1024:  # a flood of made-up hosts is not remembered
                _edge_hosts[host] = allowed
        if not allowed:
            error = GatewayError(
                400, f"the Host header {host[:100]!r} is not one this server answers to", "invalid_host"
            )
            body = error.anthropic_body() if scope["path"].endswith("/messages") else error.openai_body()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json"), *extra],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return None

        async def secured_send(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await application(scope, receive, secured_send)
        return None

    return edge
