"""Rate limits, Prometheus counters and key revocation hold across web processes: two limiters (two
gateways' counters) share one count; two real web processes (uvicorn, on the test database and the shared
cache) enforce one tenant limit between them, /metrics on either counts the calls both served, and a key
revoked through one is refused by both."""

import threading
import time

import httpx
import pytest

from apps.audit.services import Actor
from apps.gateway.errors import GatewayError
from apps.gateway.policy import WindowCounter
from apps.inference.models import BackendKind
from apps.tenants.models import TenantPolicy
from apps.tenants.services import api_key_create
from bench.gateway.upstream import running_upstream
from tests.inference.factories import BackendFactory
from tests.metrics.exposition import parse
from tests.servers import free_port, web_server_process


def _clear_of_a_minute_boundary(seconds_needed: float) -> None:
    """The limits slide over one-minute buckets, forgetting the previous minute gradually: start where a
    bucket will not turn over mid-test, so the exact counts below hold."""
    left = 60 - time.time() % 60
    if left < seconds_needed:
        time.sleep(left + 0.5)


@pytest.mark.django_db
async def test_two_limiters_share_one_limit():
    _clear_of_a_minute_boundary(10)
    first, second = WindowCounter(), WindowCounter()
    await first.reserve(tenant_id=7, kind="rpm", amount=1, limit=3)
    await second.reserve(tenant_id=7, kind="rpm", amount=1, limit=3)
    await first.reserve(tenant_id=7, kind="rpm", amount=1, limit=3)
    with pytest.raises(GatewayError) as refused:
        await second.reserve(tenant_id=7, kind="rpm", amount=1, limit=3)
    assert refused.value.status == 429
    assert refused.value.code == "rate_limit_rpm"
    await first.reserve(tenant_id=8, kind="rpm", amount=1, limit=3)  # another tenant counts apart


def _refused(limiter: WindowCounter, **reservation) -> GatewayError | None:
    try:
        limiter.reserve_now(**reservation)
    except GatewayError as error:
        return error
    return None


def test_the_window_slides_across_a_minute_boundary():
    """A fixed window would grant the limit again just after the minute turns; the sliding one counts the
    previous minute by the share of it still inside the last 60 s. Times are given, far from the clock's,
    and the tenant id is fresh, so the buckets are this test's own."""
    limiter, tenant_id = WindowCounter(), int(time.time() * 1000)
    minute = 1_000 * 60  # a minute start long past: its buckets cannot meet real traffic
    ask = {"tenant_id": tenant_id, "kind": "rpm", "amount": 1, "limit": 4}
    for second in (50, 55, 58, 59):
        assert _refused(limiter, **ask, now=minute + second) is None
    refused = _refused(limiter, **ask, now=minute + 60.5)  # 4 x (59.5 / 60) + 1 > 4
    assert refused is not None
    assert refused.code == "rate_limit_rpm"
    assert refused.retry_after == 15  # at 75 s, 4 x (45 / 60) + 1 = 4 fits
    assert _refused(limiter, **ask, now=minute + 75) is None
    # the refusal gave its count back: 4 x (44 / 60) + 1 + 1 = 4.93 > 4 at 76 s, 4 x (30 / 60) + 2 = 4 fits at 90 s
    assert _refused(limiter, **ask, now=minute + 76) is not None
    assert _refused(limiter, **ask, now=minute + 90) is None
    assert _refused(limiter, **ask, now=minute + 180) is None  # two minutes on, the old buckets are gone


@pytest.mark.django_db(transaction=True)
def test_concurrent_reservations_never_pass_the_limit():
    _clear_of_a_minute_boundary(20)
    limiters = [WindowCounter() for _ in range(4)]
    granted = []

    def ask(limiter):
        for _ in range(10):
            try:
                limiter.reserve_now(tenant_id=9, kind="tpm", amount=5, limit=100)
                granted.append(5)
            except GatewayError:
                pass

    threads = [threading.Thread(target=ask, args=(limiter,)) for limiter in limiters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(granted) == 100


@pytest.mark.django_db(transaction=True)
def test_two_web_processes_share_limits_metrics_and_revocation(tenant, tmp_path):
    TenantPolicy.objects.filter(tenant=tenant).update(rate_limit_rpm=4)
    _, inference_key = api_key_create(
        tenant=tenant, actor=Actor.system("test"), name="agent", scopes=["inference"]
    )
    _, admin_key = api_key_create(tenant=tenant, actor=Actor.system("test"), name="ops", scopes=["admin"])
    agent = {"Authorization": f"Bearer {inference_key}"}
    chat = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    log = tmp_path / "web.log"
    with (
        running_upstream(free_port()) as (upstream_url, _),
        web_server_process(log_path=log) as (_, first),
        web_server_process(log_path=log) as (_, second),
    ):
        BackendFactory(
            tenant=tenant,
            name="upstream",
            base_url=upstream_url,
            kind=BackendKind.OPENAI_COMPATIBLE,
            served_model="bench-model",
        )
        _clear_of_a_minute_boundary(30)
        statuses = [
            httpx.post(f"{url}/v1/chat/completions", json=chat, headers=agent, timeout=30).status_code
            for url in (first, second) * 3
        ]
        assert sorted(statuses) == [200] * 4 + [429] * 2, statuses

        requests = (
            "areal_gateway_requests_total",
            frozenset({("tenant_id", str(tenant.pk)), ("endpoint", "chat"), ("outcome", "ok")}),
        )
        deadline = time.monotonic() + 15
        while True:  # each process's journal flusher counts its steps once they are written
            counted = {
                url: parse(httpx.get(f"{url}/metrics", timeout=10).text)[1].get(requests, 0)
                for url in (first, second)
            }
            if set(counted.values()) == {4} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert counted == {first: 4, second: 4}

        for url in (first, second):
            assert httpx.get(f"{url}/v1/models", headers=agent, timeout=10).status_code == 200
        key_id = httpx.get(
            f"{first}/api/v1/keys/", headers={"Authorization": f"Bearer {admin_key}"}, timeout=10
        ).json()["results"]
        key_id = next(row["id"] for row in key_id if row["name"] == "agent")
        revoked = httpx.post(
            f"{first}/api/v1/keys/{key_id}/revoke/",
            headers={"Authorization": f"Bearer {admin_key}"},
            timeout=10,
        )
        assert revoked.status_code == 200, revoked.text
        time.sleep(1.5)  # the gateway's in-process memo of a verified key lasts 1 s
        for url in (first, second):
            refused = httpx.get(f"{url}/v1/models", headers=agent, timeout=10)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "key_revoked"
