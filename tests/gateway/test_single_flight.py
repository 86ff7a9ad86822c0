"""The gateway's snapshots are loaded once per key at a time: when one expires under load, the requests in flight
share one read instead of each making its own (apps/gateway/single_flight.py)."""

import asyncio

import pytest

from apps.gateway import policy
from apps.gateway.fresh_session_routing import candidates_clear, candidates_for
from apps.gateway.single_flight import loads_in_flight, single_flight


async def test_concurrent_callers_share_one_load():
    calls = []

    async def load():
        calls.append(1)
        await asyncio.sleep(0.05)
        return "snapshot"

    results = await asyncio.gather(*(single_flight("key", load) for _ in range(32)))
    assert results == ["snapshot"] * 32
    assert len(calls) == 1
    assert loads_in_flight() == 0
    assert await single_flight("key", load) == "snapshot"
    assert len(calls) == 2  # a finished load is not a cache: the caller's own snapshot is


async def test_a_failed_load_fails_its_waiters_and_the_next_caller_tries_again():
    attempts = []

    async def load():
        attempts.append(1)
        await asyncio.sleep(0.01)
        if len(attempts) == 1:
            raise ConnectionError("database restarting")
        return "fresh"

    outcomes = await asyncio.gather(*(single_flight("k", load) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    assert await single_flight("k", load) == "fresh"
    assert len(attempts) == 2


async def test_a_cancelled_caller_does_not_cancel_the_load_others_wait_on():
    started = asyncio.Event()

    async def load():
        started.set()
        await asyncio.sleep(0.05)
        return 42

    leaving = asyncio.ensure_future(single_flight("c", load))
    staying = asyncio.ensure_future(single_flight("c", load))
    await started.wait()
    leaving.cancel()
    assert await staying == 42
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_an_expired_candidate_snapshot_is_read_once_for_every_request_in_flight():
    candidates_clear()
    reads = []

    def load(function):
        async def read(*args):
            reads.append(args)
            await asyncio.sleep(0.02)
            return ["backend"]

        return read

    snapshots = await asyncio.gather(
        *(candidates_for(tenant_id=1, model="m", version=None, load=load) for _ in range(32))
    )
    assert len(reads) == 1
    assert {id(snapshot) for snapshot in snapshots} == {id(snapshots[0])}
    assert snapshots[0].backends == ["backend"]
    candidates_clear()


@pytest.mark.django_db(transaction=True)
async def test_an_expired_policy_is_read_once_for_every_request_in_flight(tenant, monkeypatch):
    reads = []
    real = policy.policy_load

    def counted(tenant_id):
        reads.append(tenant_id)
        return real(tenant_id)

    monkeypatch.setattr(policy, "policy_load", counted)
    policy.snapshots_clear()
    snapshots = await asyncio.gather(*(policy.policy_for(tenant.pk) for _ in range(32)))
    assert reads == [tenant.pk]
    assert {snapshot.tenant_id for snapshot in snapshots} == {tenant.pk}
    policy.snapshots_clear()
