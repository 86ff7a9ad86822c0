"""No accepted step is lost: the web process is killed with SIGKILL during a burst, restarted, and every
step whose response reached the client is in the database; stopped with SIGTERM, it stores every step before
it exits. Both with the journal's batches stored by the web process's thread and by its recorder process."""

import asyncio
import signal

import httpx
import pytest

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.servers import wait_until_healthy, web_server_process

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("recorder", ["thread", "process"])
def test_sigkill_during_a_burst_loses_no_accepted_step(backend, agent_key, tenant, tmp_path, recorder):
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "burst"}], "max_tokens": 4}
    accepted: list[str] = []

    async def burst(url, process):
        async with httpx.AsyncClient(timeout=60) as client:

            async def one():
                try:
                    response = await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    accepted.append(response.json()["id"])
                    if len(accepted) == 25:
                        process.send_signal(signal.SIGKILL)

            await asyncio.gather(*[one() for _ in range(80)])

    # The flusher waits a minute, so nothing reaches the database before the kill: only the journal can
    # bring the accepted steps back.
    with web_server_process(
        log_path=tmp_path / "web.log",
        extra_env={"AREAL_JOURNAL_FLUSH_MS": "60000", "AREAL_GATEWAY_RECORDER": recorder},
    ) as (process, url):
        asyncio.run(burst(url, process))
        process.wait(timeout=10)
        assert process.returncode == -signal.SIGKILL
    assert len(accepted) >= 25
    assert not Step.objects.filter(tenant=tenant).exists(), "nothing was flushed before the kill"
    with web_server_process(log_path=tmp_path / "web.log") as (_, url):
        wait_until_healthy(f"{url}/login/")
        stored = set(map(str, Step.objects.filter(tenant=tenant).values_list("id", flat=True)))
    missing = set(accepted) - stored
    assert not missing, f"{len(missing)} accepted steps lost"


def test_sigterm_stores_every_answered_step_through_the_recorder(backend, agent_key, tenant, tmp_path):
    headers = {"Authorization": f"Bearer {agent_key('inference')}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "stop"}], "max_tokens": 4}

    async def burst(url):
        async with httpx.AsyncClient(timeout=60) as client:
            responses = await asyncio.gather(
                *[client.post(f"{url}/v1/chat/completions", json=body, headers=headers) for _ in range(20)]
            )
        return [response.json()["id"] for response in responses if response.status_code == 200]

    # No flush before the stop: the shutdown's flush, through the recorder, is the only one.
    with web_server_process(
        log_path=tmp_path / "web.log",
        extra_env={"AREAL_JOURNAL_FLUSH_MS": "60000", "AREAL_GATEWAY_RECORDER": "process"},
    ) as (process, url):
        answered = asyncio.run(burst(url))
        assert not Step.objects.filter(tenant=tenant).exists()
        process.terminate()
        process.wait(timeout=30)
    assert len(answered) == 20
    stored = set(map(str, Step.objects.filter(tenant=tenant).values_list("id", flat=True)))
    assert stored == set(answered)
    assert "recorder is gone" not in (tmp_path / "web.log").read_text()  # the recorder stored them
