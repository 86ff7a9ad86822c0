"""The gateway's shared cursors and conversations are written by group commit (apps/gateway/sessions.py,
`SharedWrites`): the answers of the same moment share one round trip to the shared store, each returns only once
its own entries are stored, a later value of a key is never overwritten by an earlier one, and a failed write is
each of its callers' failure. The store is the real one (Redis on CI, the embedded SQLite file otherwise); a spy
around its write counts the round trips."""

import asyncio
import math
import sqlite3
from pathlib import Path

import pytest
from django.conf import settings

from apps.core import shared_state
from apps.core.shared_state import SharedStateUnavailable, shared_get
from apps.gateway import sessions
from apps.gateway.sessions import SharedWrites


def _counted(calls: list, write):
    """`write` (a shared-state write of entries), each call's entries appended to `calls` first."""

    def counted(entries, *, ttl_seconds):
        calls.append(dict(entries))
        return write(entries, ttl_seconds=ttl_seconds)

    return counted


@pytest.fixture
def round_trips(monkeypatch):
    """The writes that go through a thread (group commit), counted; the embedded store's write on the event loop
    (`shared_set_many_now`, tested below) is turned off, as when the file's lock is taken."""
    calls: list[dict] = []
    monkeypatch.setattr(sessions, "shared_set_many", _counted(calls, shared_state.shared_set_many))
    monkeypatch.setattr(sessions, "shared_set_many_now", lambda entries, *, ttl_seconds: False)
    return calls


async def test_concurrent_writes_share_round_trips_and_each_waits_for_its_own(round_trips):
    writes = SharedWrites()
    await asyncio.gather(*(writes.write({f"writes:key:{index}": str(index)}) for index in range(20)))
    for index in range(20):  # every caller returned after its entry was stored
        assert await asyncio.to_thread(shared_get, f"writes:key:{index}") == str(index)
    assert sum(len(batch) for batch in round_trips) == 20
    assert len(round_trips) < 20  # written together: entries queued while a write is pending join it


async def test_the_latest_value_of_a_key_wins(round_trips):
    writes = SharedWrites()
    await asyncio.gather(*(writes.write({"writes:cursor": str(index)}) for index in range(10)))
    assert await asyncio.to_thread(shared_get, "writes:cursor") == "9"


async def test_a_failed_write_fails_each_of_its_callers_and_the_next_one_goes_out(monkeypatch):
    real = shared_state.shared_set_many
    failures = iter([True])

    def failing_once(entries, *, ttl_seconds):
        if next(failures, False):
            raise SharedStateUnavailable("store locked")
        return real(entries, ttl_seconds=ttl_seconds)

    monkeypatch.setattr(sessions, "shared_set_many", failing_once)
    monkeypatch.setattr(sessions, "shared_set_many_now", lambda entries, *, ttl_seconds: False)
    writes = SharedWrites()
    outcomes = await asyncio.gather(
        *(writes.write({f"writes:failed:{index}": "x"}) for index in range(3)), return_exceptions=True
    )
    assert all(
        isinstance(outcome, SharedStateUnavailable) for outcome in outcomes
    )  # one write carried all three
    await writes.write({"writes:after": "y"})
    assert await asyncio.to_thread(shared_get, "writes:after") == "y"


embedded_only = pytest.mark.skipif(bool(settings.REDIS_URL), reason="the embedded SQLite store's own path")


@pytest.fixture
def no_upkeep_due(monkeypatch):
    """No purge or checkpoint due in this process (those go to the thread's write)."""
    monkeypatch.setitem(shared_state._purge, "next", math.inf)
    monkeypatch.setitem(shared_state._checkpoint, "next", math.inf)


@embedded_only
async def test_with_the_file_lock_free_the_write_is_made_on_the_event_loop(monkeypatch, no_upkeep_due):
    threaded = []
    monkeypatch.setattr(sessions, "shared_set_many", lambda entries, *, ttl_seconds: threaded.append(entries))
    await SharedWrites().write({"writes:on-loop": "1"})
    assert threaded == []
    assert shared_get("writes:on-loop") == "1"


@embedded_only
async def test_the_answers_of_one_loop_turn_share_one_write_on_the_loop(monkeypatch, no_upkeep_due):
    on_loop: list[dict] = []
    monkeypatch.setattr(sessions, "shared_set_many_now", _counted(on_loop, shared_state.shared_set_many_now))
    writes = SharedWrites()
    await asyncio.gather(*(writes.write({f"writes:turn:{index}": str(index)}) for index in range(20)))
    assert on_loop == [{f"writes:turn:{index}": str(index) for index in range(20)}]  # one write for all
    assert [shared_get(f"writes:turn:{index}") for index in range(20)] == [str(index) for index in range(20)]
    await writes.write({"writes:turn:next": "x"})  # the next turn's write goes out on its own
    assert len(on_loop) == 2


@embedded_only
async def test_with_the_file_lock_taken_the_write_waits_for_it_on_a_thread(no_upkeep_due):
    shared_get("writes:any")  # the store's file and table exist
    holder = sqlite3.connect(str(Path(settings.VAR_DIR) / shared_state.FILE_NAME), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's writer
    try:
        assert not shared_state.shared_set_many_now({"writes:locked": "1"}, ttl_seconds=60)
        write = asyncio.create_task(SharedWrites().write({"writes:locked": "1"}))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not write.done()  # its thread waits for the lock; the loop does not
    finally:
        holder.execute("COMMIT")
        holder.close()
    await write
    assert shared_get("writes:locked") == "1"


@embedded_only
async def test_a_due_purge_or_checkpoint_sends_the_write_to_the_thread(monkeypatch, no_upkeep_due):
    monkeypatch.setitem(shared_state._checkpoint, "next", 0.0)
    assert not shared_state.shared_set_many_now({"writes:due": "1"}, ttl_seconds=60)
    await SharedWrites().write({"writes:due": "1"})  # the thread's write, which checkpoints
    assert shared_get("writes:due") == "1"
    assert shared_state._checkpoint["next"] > 0.0
