"""The one authentication path for machines: the REST API and the gateway both call
`api_key_authenticate`. A verified key is cached (Redis, or files under var/ embedded), so a repeated
hit costs no database query; revocation and rotation evict it when they commit, and send
`api_key_forgotten` so that a process's own short-lived memos (the gateway's) can drop the key at once."""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.dispatch import Signal
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import authentication, exceptions

from apps.tenants.keys import key_hash

_CACHE_PREFIX = "apikey:"
_CHANGED_PREFIX = "apikey-changed:"  # a revoked or rotated key: cached entries are not trusted
_TOUCH_PREFIX = "apikey-touched:"
TOUCH_INTERVAL_SECONDS = 60

# Sent (hashed=...) whenever a key's cached verification is evicted: its revocation or rotation, in this process.
api_key_forgotten = Signal()


@dataclass(frozen=True)
class KeyPrincipal:
    """Who a request speaks for when it presents an API key."""

    key_id: int
    tenant_id: int
    tenant_slug: str
    prefix: str
    scopes: tuple[str, ...]
    expires_at: datetime | None
    revoked_at: datetime | None
    grace_until: datetime | None

    is_authenticated = True

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class KeyRejected(Exception):
    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.message = message
        self.code = code


def _to_cache(principal: KeyPrincipal) -> dict:
    return {
        "key_id": principal.key_id,
        "tenant_id": principal.tenant_id,
        "tenant_slug": principal.tenant_slug,
        "prefix": principal.prefix,
        "scopes": list(principal.scopes),
        "expires_at": principal.expires_at.isoformat() if principal.expires_at else None,
        "revoked_at": principal.revoked_at.isoformat() if principal.revoked_at else None,
        "grace_until": principal.grace_until.isoformat() if principal.grace_until else None,
    }


def _from_cache(data: dict) -> KeyPrincipal:
    def moment(value):
        return parse_datetime(value) if value else None

    return KeyPrincipal(
        key_id=data["key_id"],
        tenant_id=data["tenant_id"],
        tenant_slug=data["tenant_slug"],
        prefix=data["prefix"],
        scopes=tuple(data["scopes"]),
        expires_at=moment(data["expires_at"]),
        revoked_at=moment(data["revoked_at"]),
        grace_until=moment(data["grace_until"]),
    )


def _load(hashed: str) -> KeyPrincipal | None:
    from apps.tenants.models import ApiKey

    row = (
        ApiKey.objects.filter(hashed_secret=hashed)
        .select_related("tenant")
        .only(
            "id", "tenant__id", "tenant__slug", "prefix", "scopes", "expires_at", "revoked_at", "grace_until"
        )
        .first()
    )
    if row is None:
        return None
    return KeyPrincipal(
        key_id=row.id,
        tenant_id=row.tenant.id,
        tenant_slug=row.tenant.slug,
        prefix=row.prefix,
        scopes=tuple(row.scopes),
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        grace_until=row.grace_until,
    )


def api_key_cache_forget(hashed: str) -> None:
    """Evicts the key's cache entry and leaves a marker for as long as an entry may live: a verification
    that read the row before a revocation committed may still cache it after this eviction, and an entry
    found beside the marker is not trusted (the row is read again)."""
    cache.set(_CHANGED_PREFIX + hashed, 1, settings.AREAL_API_KEY_CACHE_SECONDS)
    cache.delete(_CACHE_PREFIX + hashed)
    api_key_forgotten.send(sender=KeyPrincipal, hashed=hashed)


def _touch(principal: KeyPrincipal, now) -> None:
    """Records last use at most once a minute per key, so a hot key does not write on every call."""
    from apps.tenants.models import ApiKey

    if cache.add(_TOUCH_PREFIX + str(principal.key_id), 1, TOUCH_INTERVAL_SECONDS):
        ApiKey.objects.filter(pk=principal.key_id).update(last_used_at=now)


def api_key_authenticate(raw_key: str) -> KeyPrincipal:
    """Returns the principal for a raw key or raises KeyRejected with a message saying why."""
    if not raw_key:
        raise KeyRejected(
            "no API key given; send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", "missing_key"
        )
    return api_key_authenticate_hashed(key_hash(raw_key))


def api_key_authenticate_hashed(hashed: str) -> KeyPrincipal:
    """`api_key_authenticate` for a key known by its hash (the key that minted a gateway session key)."""
    found = cache.get_many([_CACHE_PREFIX + hashed, _CHANGED_PREFIX + hashed])
    changed = _CHANGED_PREFIX + hashed in found
    cached = None if changed else found.get(_CACHE_PREFIX + hashed)
    if cached is not None:
        principal = _from_cache(cached)
    else:
        loaded = _load(hashed)
        if loaded is None:
            raise KeyRejected("invalid API key", "invalid_key")
        principal = loaded
        if not changed:
            cache.set(_CACHE_PREFIX + hashed, _to_cache(principal), settings.AREAL_API_KEY_CACHE_SECONDS)
    now = timezone.now()
    if principal.revoked_at and principal.revoked_at <= now:
        raise KeyRejected(f"API key {principal.prefix}… was revoked", "key_revoked")
    if principal.grace_until and principal.grace_until <= now:
        raise KeyRejected(
            f"API key {principal.prefix}… was rotated and its grace period ended at "
            f"{principal.grace_until.isoformat()}; use the replacement key",
            "key_rotated",
        )
    if principal.expires_at and principal.expires_at <= now:
        raise KeyRejected(
            f"API key {principal.prefix}… expired at {principal.expires_at.isoformat()}", "key_expired"
        )
    _touch(principal, now)
    return principal


def raw_key_from_headers(headers) -> str | None:
    """Reads `Authorization: Bearer <key>` or `x-api-key: <key>` (the OpenAI and Anthropic SDK styles)."""
    authorization = headers.get("Authorization") or headers.get("authorization") or ""
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return headers.get("x-api-key") or headers.get("X-Api-Key")


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """DRF adapter over `api_key_authenticate`. No key header: falls through to session auth."""

    def authenticate(self, request):
        raw = raw_key_from_headers(request.headers)
        if raw is None:
            return None
        try:
            principal = api_key_authenticate(raw)
        except KeyRejected as rejected:
            raise exceptions.AuthenticationFailed(rejected.message, code=rejected.code) from None
        return principal, principal

    def authenticate_header(self, request):
        return 'Bearer realm="api"'
