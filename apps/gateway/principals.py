"""Who a gateway request speaks for: an API key (through the one authentication path, with a short
in-process memo on top of its cache) or a session key minted by /rl/start_session."""

import hashlib
import secrets
import time
from dataclasses import dataclass

from django.core.cache import cache

from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.tenants.authentication import KeyRejected, api_key_authenticate

SESSION_KEY_PREFIX = "as-"
MEMO_SECONDS = 1.0  # revocation reaches every process within the API-key cache eviction plus this
_memo: dict[str, tuple[float, "Principal"]] = {}


@dataclass(frozen=True)
class Principal:
    tenant_id: int
    tenant_slug: str
    key_prefix: str
    scopes: tuple[str, ...]
    session_id: str | None = None  # set for session keys
    task_id: str = ""
    group_id: str = ""


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def session_key_mint(*, principal: Principal, session_id: str, task_id: str, group_id: str) -> str:
    raw = SESSION_KEY_PREFIX + secrets.token_urlsafe(24)
    cache.set("session-key:" + _hash(raw), {
        "tenant_id": principal.tenant_id, "tenant_slug": principal.tenant_slug, "key_prefix": principal.key_prefix,
        "scopes": list(principal.scopes), "session_id": session_id, "task_id": task_id, "group_id": group_id,
    }, 7 * 24 * 3600)
    return raw


def session_key_forget(raw: str) -> None:
    cache.delete("session-key:" + _hash(raw))
    _memo.pop(raw, None)


def _resolve(raw: str) -> Principal:
    if raw.startswith(SESSION_KEY_PREFIX):
        data = cache.get("session-key:" + _hash(raw))
        if data is None:
            raise GatewayError(401, "unknown or ended session key", "invalid_session_key")
        return Principal(tenant_id=data["tenant_id"], tenant_slug=data["tenant_slug"], key_prefix=data["key_prefix"],
                         scopes=tuple(data["scopes"]), session_id=data["session_id"], task_id=data["task_id"],
                         group_id=data["group_id"])
    try:
        key = api_key_authenticate(raw)
    except KeyRejected as rejected:
        raise GatewayError(401, rejected.message, rejected.code) from None
    return Principal(tenant_id=key.tenant_id, tenant_slug=key.tenant_slug, key_prefix=key.prefix, scopes=key.scopes)


async def authenticate(headers: dict[bytes, bytes]) -> tuple[Principal, str]:
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    raw = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
    raw = raw or headers.get(b"x-api-key", b"").decode("latin-1").strip()
    if not raw:
        raise GatewayError(401, "no API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", "missing_key")
    memo = _memo.get(raw)
    now = time.monotonic()
    if memo and memo[0] > now:
        return memo[1], raw
    principal = await database(_resolve)(raw)
    if len(_memo) > 10000:
        _memo.clear()
    _memo[raw] = (now + MEMO_SECONDS, principal)
    return principal, raw


def memo_clear() -> None:
    _memo.clear()
