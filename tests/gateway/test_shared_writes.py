"""The gateway's shared cursors and conversations are written by group commit (apps/gateway/sessions.py,
`SharedWrites`): the answers of the same moment share one round trip to the shared store, each returns only once
its own entries are stored, a later value of a key is never overwritten by an earlier one, and a failed write is
each of its callers' failure. The store is the real one (Redis on CI, the embedded SQLite file otherwise); a spy
around its write counts the round trips."""

import asyncio

import pytest

from apps.core import shared_state
from apps.core.shared_state import SharedStateUnavailable, shared_get
from apps.gateway import sessions
from apps.gateway.sessions import SharedWrites


@pytest.fixture
def round_trips(monkeypatch):
    calls = []
    real = shared_state.shared_set_many

    def counted(entries, *, ttl_seconds):
        calls.append(dict(entries))
        return real(entries, ttl_seconds=ttl_seconds)

    monkeypatch.setattr(sessions, "shared_set_many", counted)
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
    writes = SharedWrites()
    outcomes = await asyncio.gather(
        *(writes.write({f"writes:failed:{index}": "x"}) for index in range(3)), return_exceptions=True
    )
    assert all(
        isinstance(outcome, SharedStateUnavailable) for outcome in outcomes
    )  # one write carried all three
    await writes.write({"writes:after": "y"})
    assert await asyncio.to_thread(shared_get, "writes:after") == "y"
