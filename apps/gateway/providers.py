"""What the gateway sends a backend besides the agent's request: the backend's credential, only those of its
own extra parameters (`return_token_ids`, `logprobs`) that the backend's capability flags accept
(apps/inference: `InferenceBackend.returns_*`, `accepts_return_token_ids`), and the completion cap in the
field it reads (`cap_parameter`, applied in caps.py).

Both come from a per-process `BackendProfile` per backend, read from the database at a backend's first
forward and again once it is PROFILE_SECONDS old: a rotated or cleared credential, or changed flags, reach
every gateway process within that time, sessions pinned to the backend in memory included. The credential is
decrypted here and kept only in the profile's headers; it is never logged nor put in an error.
"""

import logging
import time
from dataclasses import dataclass, field

from django.db import DatabaseError

from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.gateway.forward import JSON_CONTENT
from apps.gateway.single_flight import single_flight

logger = logging.getLogger(__name__)
PROFILE_SECONDS = 5.0
MAX_PROFILES = 10_000
CREDENTIAL_REFUSED = (
    "the inference backend refused the gateway's credential for it (HTTP {status}); an admin must check "
    "the backend's credential"
)
_profiles: dict[int, tuple[float, "BackendProfile"]] = {}


@dataclass(frozen=True)
class BackendProfile:
    kind: str
    returns_token_ids: bool = True
    returns_logprobs: bool = True
    returns_token_versions: bool = True
    accepts_return_token_ids: bool = True
    cap_parameter: str = "max_tokens"  # the field a chat completion's cap goes in (apps/gateway/caps.py)
    headers: dict = field(default_factory=lambda: dict(JSON_CONTENT), repr=False)  # the credential's included
    credential_error: str = ""  # the stored credential could not be decrypted

    @property
    def anthropic(self) -> bool:
        """The backend speaks Anthropic's Messages API (forwarded natively, anthropic_native.py)."""
        return self.kind == "anthropic"

    @property
    def returns_token_data(self) -> bool:
        """A step of this backend can carry ATDP tokens (ids and behaviour logprobs); otherwise it is a
        text-only step (recording.py)."""
        return self.returns_token_ids and self.returns_logprobs


def profile_of(backend) -> BackendProfile:
    """The profile of an InferenceBackend row (its credential decrypted into the headers)."""
    from apps.inference.credentials import CredentialUnreadable, credential_headers

    flags = {
        "kind": backend.kind,
        "returns_token_ids": backend.returns_token_ids,
        "returns_logprobs": backend.returns_logprobs,
        "returns_token_versions": backend.returns_token_versions,
        "accepts_return_token_ids": backend.accepts_return_token_ids,
        "cap_parameter": backend.cap_parameter,
    }
    try:
        return BackendProfile(**flags, headers={**JSON_CONTENT, **credential_headers(backend)})
    except CredentialUnreadable as error:
        return BackendProfile(**flags, credential_error=error.message)


def _reload(backend):
    from apps.inference.selectors import backend_list
    from apps.tenants.models import Tenant

    return backend_list(tenant=Tenant(pk=backend.tenant_id)).filter(pk=backend.pk).first()


async def backend_profile(backend) -> BackendProfile:
    """The backend's profile, read again from the database once PROFILE_SECONDS old. When that read fails
    (the database is restarting), the last profile (or the routed row's own) serves one period more."""
    cached = _profiles.get(backend.pk)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    return await single_flight(("profile", backend.pk), lambda: _profile_refresh(backend, cached))


async def _profile_refresh(backend, cached) -> BackendProfile:
    try:
        row = await database(_reload)(backend)
    except DatabaseError:
        logger.warning("backend %s: its profile could not be read again; the last one is used", backend.pk)
        row = None
    if row is None and cached is not None:
        profile = cached[1]
    else:
        profile = profile_of(row if row is not None else backend)  # a row removed meanwhile: as routed
    if len(_profiles) >= MAX_PROFILES:
        _profiles.clear()
    _profiles[backend.pk] = (time.monotonic() + PROFILE_SECONDS, profile)
    return profile


def profiles_clear() -> None:
    _profiles.clear()


async def forwarding_profile(backend, *, endpoint: str, model: str) -> BackendProfile:
    """The profile to forward this request with, or the reason it cannot be forwarded to this backend."""
    profile = await backend_profile(backend)
    if profile.credential_error:
        raise GatewayError(502, profile.credential_error, "backend_credential_unreadable")
    if profile.anthropic and endpoint != "messages":
        raise GatewayError(
            400,
            f"the model {model!r} is served by an Anthropic Messages API backend: call /v1/messages",
            "endpoint_not_served",
        )
    return profile


def add_token_parameters(body: dict, *, endpoint: str, profile: BackendProfile) -> None:
    """Puts the gateway's own parameters into the forwarded OpenAI-shaped body (in place), only those the
    backend accepts: `return_token_ids` where `accepts_return_token_ids` (removed otherwise, whoever asked
    for it), `logprobs` where `returns_logprobs` (a client's own `logprobs` on chat and completions is left
    as it is; on /v1/messages the translation's is the gateway's), usage in the stream."""
    if endpoint == "messages":
        body.pop("logprobs", None)
    if profile.accepts_return_token_ids:
        body["return_token_ids"] = True
    else:
        body.pop("return_token_ids", None)
    if profile.returns_logprobs:
        if endpoint == "completions":
            body["logprobs"] = max(int(body.get("logprobs") or 0), 0)
        else:
            body["logprobs"] = True
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}


def credential_refused(status: int) -> str | None:
    """The message for a backend's 401 or 403 (its answer is not shown: a provider's may echo part of the
    key); None for any other status."""
    return CREDENTIAL_REFUSED.format(status=status) if status in (401, 403) else None
