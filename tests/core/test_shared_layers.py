"""The layers every process shares take their Redis path when REDIS_URL is set (CI): counters are Redis
integers with the window as their lifetime, and shared state entries are Redis strings with theirs. Without
Redis (the embedded default) the same calls go through the file cache and the SQLite store, and these tests
check those instead."""

import time

import pytest
from django.conf import settings
from django.core.cache import cache

from apps.core.counters import counter_add, counter_value
from apps.core.shared_state import shared_find, shared_get, shared_set_many


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
