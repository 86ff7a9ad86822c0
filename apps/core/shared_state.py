"""Short-lived entries (text keys, text values, each with a lifetime) that every web process sees, for state
that must not depend on which process a request lands on: the gateway's session keys and ended sessions
(apps/gateway/principals.py), its session cursors and conversation map (apps/gateway/sessions.py). Each
call is one round trip and blocking: call it off the event loop.

- Redis (`REDIS_URL`): plain strings under the cache's key prefix (so tests' cache clearing reaches them),
  read with GET or one Lua script (`shared_find`), written with SET EX in one pipeline, deleted with DEL.
- Otherwise: a SQLite file in the var directory (`shared-state.sqlite3`, WAL), shared by the processes of
  this machine as the rest of the embedded default is. Not the embedded file cache: Django's file cache
  culls a random third of its entries once it holds 300 (live session keys would vanish, and agents get
  401 mid-session) and lists its whole directory on every write. Expired rows are deleted a batch at a
  time by the writers.
"""

import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

FILE_NAME = "shared-state.sqlite3"
PURGE_EVERY_SECONDS = 30.0
PURGE_BATCH = 1000
CHECKPOINT_EVERY_SECONDS = 1.0
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


class _Redis:
    """This process's Redis client and key function for the shared store and the counters."""

    def __init__(self, backend: RedisCache):
        self.client = backend._cache.get_client(write=True)
        # The cache's prefix and version, so clearing the cache's keys reaches these too.
        self.key = backend.make_key


_process_redis: dict = {}


def redis_store() -> "_Redis | None":
    """One RedisCache backend per process (and with it one connection pool), or None without Redis. Not
    `caches["default"]`: Django keeps one backend per asyncio context, and `asyncio.to_thread` and
    `sync_to_async` run each call in a copy of the context, so each call would build a backend, a pool and a
    new connection (a TCP connect and a handshake: measured 3.6 ms of the gateway's CPU per request)."""
    if not settings.REDIS_URL:
        return None
    found = _process_redis.get(os.getpid())
    if found is None:
        backend = caches.create_connection("default")
        found = _process_redis.setdefault(
            os.getpid(), _Redis(backend) if isinstance(backend, RedisCache) else None
        )
    return found


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def shared_get(key: str) -> str | None:
    """The entry's value, or None when it does not exist or has expired."""
    redis = redis_store()
    try:
        if redis is not None:
            return _text(redis.client.get(redis.key(key)))
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
    redis = redis_store()
    try:
        if redis is not None:
            found: Any = redis.client.eval(
                _FIND_SCRIPT,
                len(candidates),
                *(redis.key(key) for key in candidates),
                redis.key(follow_prefix),
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
    redis = redis_store()
    try:
        if redis is not None:
            with redis.client.pipeline(transaction=False) as pipeline:
                for key, value in entries.items():
                    pipeline.set(redis.key(key), value, ex=ttl_seconds)
                pipeline.execute()
            return
        expires_at = time.time() + ttl_seconds
        with _writing() as connection:
            connection.executemany(
                "INSERT OR REPLACE INTO entries (key, value, expires_at) VALUES (?, ?, ?)",
                [(key, value, expires_at) for key, value in entries.items()],
            )
            _purge_if_due(connection)
        _checkpoint_if_due(connection)
    except _FAILURES as error:
        raise SharedStateUnavailable(str(error)) from error


def shared_set_many_now(entries: Mapping[str, str], *, ttl_seconds: int) -> bool:
    """`shared_set_many` on the embedded store on the caller's thread (the event loop), only where it does not
    wait: True once written, False without writing when another writer holds the file's lock, when a purge or
    a checkpoint is due (those are `shared_set_many`'s, off the loop), or on Redis. A commit with
    `synchronous=NORMAL` and no checkpoint is a write(2) into the WAL, no fsync: tens of microseconds, where a
    thread hop costs the event loop a wake-up and a wait for the interpreter."""
    if not entries:
        return True
    if settings.REDIS_URL or time.monotonic() >= min(_purge["next"], _checkpoint["next"]):
        return False
    expires_at = time.time() + max(1, int(ttl_seconds))
    try:
        connection = _connection(waiting=False)
        connection.execute("BEGIN IMMEDIATE")
    except _FAILURES:
        return False  # locked (busy_timeout 0), or unusable: the thread's write waits or reports it
    try:
        connection.executemany(
            "INSERT OR REPLACE INTO entries (key, value, expires_at) VALUES (?, ?, ?)",
            [(key, value, expires_at) for key, value in entries.items()],
        )
        connection.execute("COMMIT")
    except _FAILURES as error:
        with suppress(sqlite3.Error):
            connection.execute("ROLLBACK")
        raise SharedStateUnavailable(str(error)) from error
    return True


def shared_delete(keys: Sequence[str]) -> None:
    """Deletes the entries that exist among `keys` (the others are ignored), in one round trip."""
    if not keys:
        return
    redis = redis_store()
    try:
        if redis is not None:
            redis.client.delete(*(redis.key(key) for key in keys))
            return
        with _writing() as connection:
            connection.executemany("DELETE FROM entries WHERE key = ?", [(key,) for key in keys])
    except _FAILURES as error:
        raise SharedStateUnavailable(str(error)) from error


def shared_clear() -> None:
    """Empties the embedded store (tests). On Redis the entries go with the cache's keys."""
    if redis_store() is None:
        _connection().execute("DELETE FROM entries")


# embedded store -----------------------------------------------------------------------------------------
_local = threading.local()
_purge = {"next": 0.0}
_checkpoint = {"next": 0.0}


def _connection(*, waiting: bool = True) -> sqlite3.Connection:
    """This thread's connection to the var directory's store (created with its table on first use); with
    `waiting` false, its second one, which never waits for the lock (busy_timeout 0) and never checkpoints the
    WAL (a checkpoint fsyncs: `_checkpoint_if_due` does it from a waiting connection, off the event loop)."""
    path = str(Path(settings.VAR_DIR) / FILE_NAME)
    owner = (os.getpid(), path, waiting)
    name = "connection" if waiting else "connection_now"
    if getattr(_local, name + "_owner", None) != owner:
        connection = sqlite3.connect(path, timeout=10 if waiting else 0, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")  # no fsync per write: this state may be lost
        if not waiting:
            connection.execute("PRAGMA wal_autocheckpoint=0")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS entries "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID"
        )
        connection.execute("CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at)")
        setattr(_local, name, connection)
        setattr(_local, name + "_owner", owner)
    return getattr(_local, name)


@contextmanager
def _writing():
    """This thread's connection in a write transaction (BEGIN IMMEDIATE: writers queue for the lock rather
    than fail on upgrade), committed at the end or rolled back on any exception."""
    connection = _connection()
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


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


def _checkpoint_if_due(connection: sqlite3.Connection) -> None:
    """Copies the WAL back into the database file every CHECKPOINT_EVERY_SECONDS per process (PASSIVE: it waits
    for no reader or writer), since the writes on the event loop (`shared_set_many_now`) never do; outside a
    transaction."""
    moment = time.monotonic()
    if moment < _checkpoint["next"]:
        return
    _checkpoint["next"] = moment + CHECKPOINT_EVERY_SECONDS
    connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
