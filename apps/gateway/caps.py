"""The completion cap of a generation request: what is reserved (budget, tokens per minute) before forwarding
is what the backend may generate, never less.

A request that names a cap (`max_tokens`, `max_completion_tokens`; servers honour one or the other) is reserved
at the larger and forwarded with both. One that names none is reserved at AREAL_GATEWAY_DEFAULT_MAX_TOKENS and
forwarded with that cap, unless the backend's own context length (its `max_model_len` in /v1/models, which vLLM
and the embedded server publish) is no larger: then the backend's own limit (what is left of its context after
the prompt) is already below the reservation, and no cap is forwarded, so a long prompt is not refused for a cap
the client never asked for.
"""

import time

from django.conf import settings

from apps.gateway.forward import backend_session

CAP_FIELDS = ("max_tokens", "max_completion_tokens")
LENGTH_SECONDS = 300.0  # how long a backend's published context length is kept
UNKNOWN_SECONDS = 60.0  # and how long a backend that publishes none is not asked again
PROBE_SECONDS = 5.0
_lengths: dict[tuple[str, str], tuple[float, int | None]] = {}


def requested_cap(body: dict) -> int | None:
    """The most tokens per choice the request itself allows, or None when it names no cap."""
    caps = [body[name] for name in CAP_FIELDS if body.get(name) is not None]
    return max(caps) if caps else None


def reserved_cap(body: dict) -> int:
    """The completion tokens per choice to reserve for this request."""
    return requested_cap(body) or settings.AREAL_GATEWAY_DEFAULT_MAX_TOKENS


async def model_context_length(backend, headers: dict | None = None) -> int | None:
    """The backend's published context length for the model it serves (cached per process), or None.
    `headers`: the backend's credential (apps/gateway/providers.py)."""
    key = (backend.base_url, backend.served_model)
    cached = _lengths.get(key)
    now = time.monotonic()
    if cached and cached[0] > now:
        return cached[1]
    length = None
    try:
        async with backend_session().get(
            backend.base_url + "/v1/models", headers=headers, allow_redirects=False, timeout=_probe_timeout()
        ) as response:
            if response.status == 200:
                models = (await response.json(content_type=None)).get("data") or []
                for model in models:
                    if isinstance(model, dict) and model.get("id") == backend.served_model:
                        value = model.get("max_model_len")
                        length = (
                            value
                            if isinstance(value, int) and not isinstance(value, bool) and value > 0
                            else None
                        )
    except Exception:  # unreachable, not JSON, another shape: unknown, and the reserved cap is forwarded
        length = None
    _lengths[key] = (now + (LENGTH_SECONDS if length else UNKNOWN_SECONDS), length)
    return length


def _probe_timeout():
    import aiohttp

    return aiohttp.ClientTimeout(total=PROBE_SECONDS)


async def apply_cap(forward_body: dict, *, reserved: int, backend, headers: dict | None = None) -> None:
    """Puts the reserved cap into the body sent to the backend (in place)."""
    for name in CAP_FIELDS:
        if forward_body.get(name) is None:
            forward_body.pop(name, None)
    requested = requested_cap(forward_body)
    if requested is not None:
        # Whichever field a server honours is at most the larger one, which was reserved; max_tokens is filled in
        # for servers that read only it (completions).
        forward_body["max_tokens"] = forward_body.get("max_tokens") or requested
        return
    length = await model_context_length(backend, headers)
    if length is not None and length <= reserved:
        return  # the backend stops within its context: fewer tokens than were reserved
    forward_body["max_tokens"] = reserved


def lengths_clear() -> None:
    _lengths.clear()
