"""Who a gateway request speaks for: an API key (through the one authentication path, with a short
in-process memo on top of its cache) or a session key minted by /rl/start_session.

Session keys live in the state every process shares (apps.core.shared_state: Redis, or the embedded SQLite
file; never Django's file cache, which culls a third of its entries at 300 and would drop live keys):
`gateway-session-key:<hash of the key>` → its JSON (tenant, scopes, session, the minting API key's hash,
`ended`, `expires_at`), for SESSION_KEY_SECONDS. Every call on that store blocks: the gateway makes them
on its database thread (`database`), never on the event loop. A key that cannot be read there is refused
(503 `session_store_unavailable`, retry), never accepted unverified.

A session key lives no longer than the API key that minted it: each time it is resolved, that key is checked
again through the shared cache (which revocation and rotation evict), so revoking the key refuses its session
keys on every process at once (after at most MEMO_SECONDS where a process had just seen the session key; the
process that revokes forgets its memo at once). Rotating the key ends the session keys minted before the
rotation; those minted with the old key during its grace period live until that period ends. An ended
session's key answers 410 until the key expires (ending keeps its remaining lifetime); an unknown key answers
401. A session ended by its tenant's API key (AReaL's older clients name the session instead of using its key)
is marked ended in the shared state by tenant and session id (`gateway-session-ended:`), which every session
key of that session is checked against."""

import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass

from apps.core.shared_state import SharedStateUnavailable, shared_delete, shared_get, shared_set_many
from apps.gateway.db import database
from apps.gateway.errors import GatewayError
from apps.tenants.authentication import (
    KeyRejected,
    api_key_authenticate,
    api_key_authenticate_hashed,
    api_key_forgotten,
)
from apps.tenants.keys import key_hash

SESSION_KEY_PREFIX = "as-"
SESSION_KEY_SECONDS = 7 * 24 * 3600
MEMO_SECONDS = 1.0  # revocation reaches every process within the API-key cache eviction plus this
STORE_RETRY_SECONDS = 1
logger = logging.getLogger(__name__)
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
    # The API key this principal is, or that minted this session key (None: a session key minted by the system,
    # as evaluation runs do), and whether that key was already rotated (in its grace period) when authenticated.
    api_key_hash: str | None = None
    api_key_rotated: bool = False


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _session_entry_key(raw: str) -> str:
    return "gateway-session-key:" + _hash(raw)


def _ended_entry_key(tenant_id: int, session_id: str) -> str:
    return f"gateway-session-ended:{tenant_id}:{_hash(session_id)}"


def store_unavailable(error: SharedStateUnavailable) -> GatewayError:
    """The gateway's answer when session keys cannot be read or written: refused, worth a retry."""
    return GatewayError(
        503,
        f"session keys cannot be verified or recorded right now (shared state unavailable: {error}); "
        "retry shortly",
        "session_store_unavailable",
        retry_after=STORE_RETRY_SECONDS,
    )


def _session_entry(raw: str) -> dict | None:
    """The session key's entry, or None when it is unknown or expired. Raises SharedStateUnavailable."""
    stored = shared_get(_session_entry_key(raw))
    if stored is None:
        return None
    try:
        data = json.loads(stored)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def session_key_mint(*, principal: Principal, session_id: str, task_id: str, group_id: str) -> str:
    """A new session key bound to `session_id`, valid while the principal's API key is (see the module docstring);
    a principal without an API key (the system's) mints a key bounded only by its expiry and its ending.
    Blocking; raises SharedStateUnavailable when the key cannot be recorded."""
    raw = SESSION_KEY_PREFIX + secrets.token_urlsafe(24)
    entry = {
        "tenant_id": principal.tenant_id,
        "tenant_slug": principal.tenant_slug,
        "key_prefix": principal.key_prefix,
        "scopes": list(principal.scopes),
        "session_id": session_id,
        "task_id": task_id,
        "group_id": group_id,
        "parent_key_hash": principal.api_key_hash,
        "minted_while_rotating": principal.api_key_rotated,
        "ended": False,
        "expires_at": time.time() + SESSION_KEY_SECONDS,
    }
    shared_set_many({_session_entry_key(raw): json.dumps(entry)}, ttl_seconds=SESSION_KEY_SECONDS)
    return raw


def session_key_end(raw: str) -> None:
    """Marks the session key ended in the shared state for the rest of its lifetime: every process then answers
    it with 410. Blocking; raises SharedStateUnavailable."""
    data = _session_entry(raw)
    if data is not None:
        remaining = data["expires_at"] - time.time()
        if remaining > 0:
            shared_set_many(
                {_session_entry_key(raw): json.dumps({**data, "ended": True})}, ttl_seconds=int(remaining) + 1
            )
    _memo.pop(raw, None)


def session_mark_ended(*, tenant_id: int, session_id: str) -> None:
    """Every session key of this session answers 410 from now on, on every process (this one at once, the
    others within MEMO_SECONDS). Lives SESSION_KEY_SECONDS, as long as a key minted now. Blocking; raises
    SharedStateUnavailable."""
    shared_set_many({_ended_entry_key(tenant_id, session_id): "1"}, ttl_seconds=SESSION_KEY_SECONDS)
    for raw, (_, principal) in list(_memo.items()):
        if principal.tenant_id == tenant_id and principal.session_id == session_id:
            _memo.pop(raw, None)


def session_key_forget(raw: str) -> None:
    """Deletes a key its minter is done with (evaluation runs, the judge: keys never handed out). Blocking;
    where the shared state is unavailable the key is left to expire, with a warning, so that a caller's
    cleanup never fails."""
    _memo.pop(raw, None)
    try:
        shared_delete([_session_entry_key(raw)])
    except SharedStateUnavailable as error:
        logger.warning("a session key could not be deleted and will expire on its own: %s", error)


def _check_parent(data: dict) -> None:
    parent_hash = data["parent_key_hash"]
    if parent_hash is None:
        return
    try:
        parent = api_key_authenticate_hashed(parent_hash)
    except KeyRejected as rejected:
        raise GatewayError(
            401, f"this session key's API key is refused: {rejected.message}", rejected.code
        ) from None
    if parent.grace_until is not None and not data["minted_while_rotating"]:
        raise GatewayError(
            401,
            f"API key {parent.prefix}… was rotated, which ended the sessions it had started; "
            "start a new session",
            "key_rotated",
        )


def _resolve(raw: str) -> Principal:
    if raw.startswith(SESSION_KEY_PREFIX):
        try:  # fail closed: a key that cannot be read is refused, never taken on trust
            data = _session_entry(raw)
            if data is None:
                raise GatewayError(401, "unknown or expired session key", "invalid_session_key")
            _check_parent(data)
            ended = data["ended"] or shared_get(_ended_entry_key(data["tenant_id"], data["session_id"]))
        except SharedStateUnavailable as error:
            raise store_unavailable(error) from None
        if ended:
            raise GatewayError(410, f"session {data['session_id']} has ended", "session_ended")
        return Principal(
            tenant_id=data["tenant_id"],
            tenant_slug=data["tenant_slug"],
            key_prefix=data["key_prefix"],
            scopes=tuple(data["scopes"]),
            session_id=data["session_id"],
            task_id=data["task_id"],
            group_id=data["group_id"],
            api_key_hash=data["parent_key_hash"],
            api_key_rotated=data["minted_while_rotating"],
        )
    try:
        key = api_key_authenticate(raw)
    except KeyRejected as rejected:
        raise GatewayError(401, rejected.message, rejected.code) from None
    return Principal(
        tenant_id=key.tenant_id,
        tenant_slug=key.tenant_slug,
        key_prefix=key.prefix,
        scopes=key.scopes,
        api_key_hash=key_hash(raw),
        api_key_rotated=key.grace_until is not None,
    )


def presented_key(headers: dict[bytes, bytes]) -> str:
    """The key a request presents: `Authorization: Bearer <key>`, else `x-api-key`; "" when none."""
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    raw = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
    return raw or headers.get(b"x-api-key", b"").decode("latin-1").strip()


async def authenticate(headers: dict[bytes, bytes]) -> tuple[Principal, str]:
    raw = presented_key(headers)
    if not raw:
        raise GatewayError(
            401, "no API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", "missing_key"
        )
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


def memo_forget_on_revocation(sender, **kwargs) -> None:
    """A key revoked or rotated in this process: forget every memo (session keys included) at once."""
    _memo.clear()


api_key_forgotten.connect(memo_forget_on_revocation)
