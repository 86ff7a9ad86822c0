"""Short-lived entries (text keys, text values, each with a lifetime) that every web process sees, for state
that must not depend on which process a request lands on: the gateway's session cursors and conversation
map (apps/gateway/sessions.py). Each call is one round trip and blocking: call it off the event loop.

- Redis (`REDIS_URL`): plain strings under the cache's key prefix (so tests' cache clearing reaches them),
  read with GET or one Lua script (`shared_find`), written with SET EX in one pipeline.
- Otherwise: a SQLite file in the var directory (`shared-state.sqlite3`, WAL), shared by the processes of
  this machine as the rest of the embedded default is. Not the embedded file cache: Django's file cache
  culls a random third of its entries once it holds 300 (which would drop session keys and rate counters
  along with these per-request entries) and lists its whole directory on every write. Expired rows are
  deleted a batch at a time by the writers.
"""

import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

FILE_NAME = "shared-state.sqlite3"
PURGE_EVERY_SECONDS = 30.0
PURGE_BATCH = 1000
_FAILURES = (RedisError, sqlite3.Error, OSError)

# The first of KEYS that exists, and the entry named ARGV[1] .. its value: one round trip, not two.
_FIND_SCRIPT = """
for index = 1, #KEYS do
  local found = redis.call('GET', KEYS[index])
  if found then
    return {found, redis.call('GET', ARGV[1] .. found) or false}
  end
end
return {}
"""


class SharedStateUnavailable(Exception):
    """The shared store could not be read or written (Redis unreachable, the SQLite file locked too long)."""


def _redis_client():
    backend = caches["default"]  # the backend itself: `cache` is a proxy, never an instance of RedisCache
    return backend._cache.get_client(write=True) if isinstance(backend, RedisCache) else None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def shared_get(key: str) -> str | None:
    """The entry's value, or None when it does not exist or has expired."""
    client = _redis_client()
    try:
        if client is not None:
            return _text(client.get(cache.make_key(key)))
        row = (
            _connection()
            .execute("SELECT value FROM entries WHERE key = ? AND expires_at > ?", (key, time.time()))
            .fetchone()
        )
    except _FAILURES as error:
        raise SharedStateUnavailable(str(error)) from error
    return row[0] if row else None


def shared_find(candidates: Sequence[str], *, follow_prefix: str) -> tuple[str | None, str | None]:
    """(value of the first of `candidates` that exists, value of the entry `follow_prefix + that value`), in
    one read; (None, None) when no candidate exists."""
    if not candidates:
        return None, None
    client = _redis_client()
    try:
        if client is not None:
            found = client.eval(
                _FIND_SCRIPT,
                len(candidates),
                *(cache.make_key(key) for key in candidates),
                cache.make_key(follow_prefix),
            )
            if not found:
                return None, None
            return _text(found[0]), _text(found[1]) if len(found) > 1 else None
        now = time.time()
        wanted = ", ".join("(?, ?)" for _ in candidates)
        row = (
            _connection()
            .execute(
                f"WITH wanted(position, key) AS (VALUES {wanted}), "  # noqa: S608 (placeholders only)
                "hit AS (SELECT entries.value AS value FROM wanted JOIN entries ON entries.key = wanted.key "
                "WHERE entries.expires_at > ? ORDER BY wanted.position LIMIT 1) "
                "SELECT hit.value, (SELECT value FROM entries WHERE key = ? || hit.value AND expires_at > ?) "
                "FROM hit",
                [item for position, key in enumerate(candidates) for item in (position, key)]
                + [now, follow_prefix, now],
            )
            .fetchone()
        )
    except _FAILURES as error:
        raise SharedStateUnavailable(str(error)) from error
    return (row[0], row[1]) if row else (None, None)


def shared_set_many(entries: Mapping[str, str], *, ttl_seconds: int) -> None:
    """Writes every entry (replacing what was there) to live `ttl_seconds` from now, in one round trip."""
    if not entries:
        return
    ttl_seconds = max(1, int(ttl_seconds))
    client = _redis_client()
    try:
        if client is not None:
            with client.pipeline(transaction=False) as pipeline:
                for key, value in entries.items():
                    pipeline.set(cache.make_key(key), value, ex=ttl_seconds)
                pipeline.execute()
            return
        connection = _connection()
        expires_at = time.time() + ttl_seconds
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.executemany(
                "INSERT OR REPLACE INTO entries (key, value, expires_at) VALUES (?, ?, ?)",
                [(key, value, expires_at) for key, value in entries.items()],
            )
            _purge_if_due(connection)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    except _FAILURES as error:
        raise SharedStateUnavailable(str(error)) from error


def shared_clear() -> None:
    """Empties the embedded store (tests). On Redis the entries go with the cache's keys."""
    if _redis_client() is None:
        _connection().execute("DELETE FROM entries")


# embedded store -----------------------------------------------------------------------------------------
_local = threading.local()
_purge = {"next": 0.0}


def _connection() -> sqlite3.Connection:
    """This thread's connection to the var directory's store (created with its table on first use)."""
    path = str(Path(settings.VAR_DIR) / FILE_NAME)
    owner = (os.getpid(), path)
    if getattr(_local, "owner", None) != owner:
        connection = sqlite3.connect(path, timeout=10, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")  # no fsync per write: this state may be lost
        connection.execute(
            "CREATE TABLE IF NOT EXISTS entries "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID"
        )
        connection.execute("CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at)")
        _local.connection, _local.owner = connection, owner
    return _local.connection


def _purge_if_due(connection: sqlite3.Connection) -> None:
    """Deletes up to PURGE_BATCH expired rows every PURGE_EVERY_SECONDS per process (sooner while more are
    left), inside the writer's transaction, so no request pays for more than one batch."""
    moment = time.monotonic()
    if moment < _purge["next"]:
        return
    deleted = connection.execute(
        "DELETE FROM entries WHERE key IN (SELECT key FROM entries WHERE expires_at <= ? LIMIT ?)",
        (time.time(), PURGE_BATCH),
    ).rowcount
    _purge["next"] = moment + (0.0 if deleted >= PURGE_BATCH else PURGE_EVERY_SECONDS)
