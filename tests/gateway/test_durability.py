"""No accepted step is lost: the web process is killed with SIGKILL during a burst, restarted, and every
step whose response reached the client is in the database."""

import asyncio
import signal

import httpx
import pytest

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.servers import wait_until_healthy, web_server_process

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_sigkill_during_a_burst_loses_no_accepted_step(backend, agent_key, tenant, tmp_path):
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
    with web_server_process(log_path=tmp_path / "web.log", extra_env={"AREAL_JOURNAL_FLUSH_MS": "60000"}) as (
        process,
        url,
    ):
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
