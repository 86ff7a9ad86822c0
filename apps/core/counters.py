"""Counters shared by every process (and, with Redis, every host), changed atomically.

Sign-in throttling and the gateway's rate limits count here, so that two web workers, or two hosts, see
one count. A counter is created with a lifetime (its window) on its first change and disappears when
the window ends; later changes do not extend it.

- Redis (`REDIS_URL`): `SET key 0 EX window NX` and `INCRBY key amount` in one MULTI/EXEC transaction,
  through this process's one connection pool (`shared_state.redis_store`) and the cache's key prefix.
- Otherwise (the embedded file cache): the read and the write of the cache entry happen under an
  exclusive `flock` on a file in the var directory, which serializes threads and processes of this machine
  (the embedded default runs on one machine). Django's `cache.incr` is a get followed by a set there, and
  would lose counts under concurrency.
"""

import fcntl
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache

from apps.core.shared_state import redis_store


@contextmanager
def _locked():
    path = Path(settings.VAR_DIR) / "counters.lock"
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def counter_add(*, key: str, amount: int = 1, window_seconds: int) -> int:
    """Adds `amount` (may be negative) to the counter `key` and returns its new value, atomically with
    respect to every other process sharing the cache. A counter that does not exist starts at 0 and lives
    `window_seconds` from this call."""
    window_seconds = max(1, int(window_seconds))
    redis = redis_store()
    if redis is not None:
        full_key = redis.key(key)
        with redis.client.pipeline(transaction=True) as pipeline:
            pipeline.set(full_key, 0, ex=window_seconds, nx=True)
            pipeline.incrby(full_key, amount)
            _, value = pipeline.execute()
        return int(value)
    with _locked():
        now = time.time()
        entry = cache.get(key)
        if entry is None or entry[1] <= now:
            count, expires_at = 0, now + window_seconds
        else:
            count, expires_at = entry
        count += amount
        cache.set(key, (count, expires_at), timeout=max(1, math.ceil(expires_at - now)))
        return count


def counter_value(*, key: str) -> int:
    """The counter's current value (0 when it does not exist or its window has ended)."""
    redis = redis_store()
    if redis is not None:
        value: Any = redis.client.get(redis.key(key))  # bytes or None: the client is synchronous
        return int(value) if value is not None else 0
    entry = cache.get(key)
    if entry is None or entry[1] <= time.time():
        return 0
    return entry[0]


def counter_delete(*, key: str) -> None:
    cache.delete(key)
