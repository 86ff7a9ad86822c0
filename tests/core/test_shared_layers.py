"""The layers every process shares take their Redis path when REDIS_URL is set (CI): counters are Redis
integers with the window as their lifetime, and shared state entries are Redis strings with theirs. Without
Redis (the embedded default) the same calls go through the file cache and the SQLite store, and these tests
check those instead."""

import time

import pytest
from django.conf import settings
from django.core.cache import cache

from apps.core.counters import counter_add, counter_value
from apps.core.shared_state import shared_delete, shared_find, shared_get, shared_set_many


def _redis():
    from django.core.cache import caches

    return caches["default"]._cache.get_client(write=True)


def test_counters_count_in_redis_when_it_is_configured():
    assert counter_add(key="layers:count", amount=2, window_seconds=30) == 2
    assert counter_add(key="layers:count", amount=3, window_seconds=30) == 5
    assert counter_value(key="layers:count") == 5
    if not settings.REDIS_URL:
        pytest.skip("embedded default: counted in the file cache (tests/gateway/test_shared_limits.py)")
    client = _redis()
    assert client.get(cache.make_key("layers:count")) == b"5"  # INCRBY, not a pickled read-modify-write
    assert 0 < client.ttl(cache.make_key("layers:count")) <= 30


def test_shared_state_entries_live_their_ttl_and_are_found_in_one_read():
    shared_set_many({"layers:a": "s1", "layers:b": "s2", "layers:cursor:s2": "[1]"}, ttl_seconds=60)
    assert shared_get("layers:a") == "s1"
    assert shared_get("layers:missing") is None
    assert shared_find(["layers:x", "layers:b", "layers:a"], follow_prefix="layers:cursor:") == ("s2", "[1]")
    assert shared_find(["layers:a"], follow_prefix="layers:cursor:") == ("s1", None)
    assert shared_find(["layers:x"], follow_prefix="layers:cursor:") == (None, None)
    if settings.REDIS_URL:
        client = _redis()
        assert client.get(cache.make_key("layers:a")) == b"s1"
        assert 0 < client.ttl(cache.make_key("layers:a")) <= 60


def test_a_shared_state_entry_past_its_ttl_is_gone():
    shared_set_many({"layers:short": "gone soon", "layers:cursor:gone soon": "[2]"}, ttl_seconds=1)
    time.sleep(1.2)
    assert shared_get("layers:short") is None
    assert shared_find(["layers:short"], follow_prefix="layers:cursor:") == (None, None)


def test_shared_state_entries_are_deleted_in_one_call_and_missing_ones_ignored():
    shared_set_many({"layers:d1": "one", "layers:d2": "two", "layers:kept": "three"}, ttl_seconds=60)
    shared_delete(["layers:d1", "layers:d2", "layers:never-written"])
    shared_delete([])
    assert shared_get("layers:d1") is None
    assert shared_get("layers:d2") is None
    assert shared_get("layers:kept") == "three"
    assert shared_find(["layers:d1", "layers:kept"], follow_prefix="layers:cursor:") == ("three", None)
    if settings.REDIS_URL:
        assert _redis().exists(cache.make_key("layers:d1")) == 0


async def test_calls_from_the_event_loop_do_not_open_a_connection_each():
    """Each `asyncio.to_thread` call runs in a copy of the context, where Django's `caches` would build a new
    backend and open a new Redis connection: the shared state keeps one client per process instead."""
    import asyncio

    def connections_received() -> int:
        return _redis().info("stats")["total_connections_received"] if settings.REDIS_URL else 0

    await asyncio.to_thread(shared_set_many, {"layers:pool:warm": "x"}, ttl_seconds=30)
    before = await asyncio.to_thread(connections_received)
    for index in range(20):
        await asyncio.to_thread(shared_set_many, {f"layers:pool:{index}": "x"}, ttl_seconds=30)
        assert await asyncio.to_thread(shared_get, f"layers:pool:{index}") == "x"
    if not settings.REDIS_URL:
        pytest.skip("embedded default: the SQLite store keeps one connection per thread")
    opened = await asyncio.to_thread(connections_received) - before
    assert opened <= 3, f"{opened} Redis connections opened for 40 calls"
