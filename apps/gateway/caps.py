"""The completion cap of a generation request: what is reserved (budget, tokens per minute) before forwarding
is what the backend may generate, never less.

A request that names a cap (`max_tokens`, `max_completion_tokens`; servers honour one or the other) is reserved
at the larger. One that names none is reserved at AREAL_GATEWAY_DEFAULT_MAX_TOKENS, unless the backend's own
context length (its `max_model_len` in /v1/models, which vLLM and the embedded server publish) is no larger:
then the backend's own limit (what is left of its context after the prompt) is already below the reservation,
and no cap is forwarded, so a long prompt is not refused for a cap the client never asked for.

The reserved cap is forwarded in one field only, the one the backend reads: its `cap_parameter` on chat
completions (OpenAI's reasoning models refuse `max_tokens`; some other servers read nothing else), always
`max_tokens` on the legacy completions endpoint. Whichever field the client used, the backend gets the cap.
"""

import asyncio
import time

from django.conf import settings

from apps.gateway.forward import backend_session
from apps.gateway.single_flight import single_flight

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
    if cached and cached[0] > time.monotonic():
        return cached[1]
    return await single_flight(("context-length", *key), lambda: _probe_context_length(backend, headers))


async def _probe_context_length(backend, headers: dict | None) -> int | None:
    key = (backend.base_url, backend.served_model)
    length = None
    try:
        async with (
            asyncio.timeout(PROBE_SECONDS),
            backend_session().get(backend.base_url + "/v1/models", headers=headers) as response,
        ):
            if response.status == 200:
                models = (await response.json()).get("data") or []
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
    _lengths[key] = (time.monotonic() + (LENGTH_SECONDS if length else UNKNOWN_SECONDS), length)
    return length


async def apply_cap(forward_body: dict, *, reserved: int, backend, endpoint: str, profile) -> None:
    """Puts the reserved cap into the body sent to the backend (in place), in the one field it reads.
    `profile`: the backend's (apps/gateway/providers.py): its cap field and its credential."""
    field = "max_tokens" if endpoint == "completions" else profile.cap_parameter
    requested = requested_cap(forward_body)
    for name in CAP_FIELDS:
        forward_body.pop(name, None)
    if requested is not None:
        forward_body[field] = requested  # the larger of the two, which was reserved
        return
    length = await model_context_length(backend, profile.headers)
    if length is not None and length <= reserved:
        return  # the backend stops within its context: fewer tokens than were reserved
    forward_body[field] = reserved
