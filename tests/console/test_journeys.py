"""Browser journeys in a real headless Chromium against the whole ASGI app (console, gateway, WebSockets)
served by uvicorn, with the real embedded inference server behind the gateway.

A tenant admin creates an API key, the demo agent (an unmodified openai-SDK client) uses it while the
overview page draws its traffic live; the admin rotates the key ending the old one at once, then revokes
the new one, and the gateway refuses each (401). The annotator keyboard journey is
tests/annotation/test_browser.py; the operator approval journey is tests/releases/test_browser.py."""

import time

import httpx
import openai
import pytest

from tests.browser_support import ARTIFACTS, browser, login, page  # noqa: F401  (fixtures)
from tests.gateway.conftest import MODEL, backend, embedded_backend_url, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from workers.envs import weather
from workers.envs.agent import run_episode

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUSAL_DEADLINE_SECONDS = 5.0  # the gateway's key memo lasts 1 s (apps/gateway/principals.py)


def _episode(url, key, seed=0):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
    task = weather.make_tasks(split="train", count=1, seed=seed)[0]
    return run_episode(client, model=MODEL, task=task, max_turns=2, max_tokens=12)


def _status(url, key) -> int:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    ).status_code


def _refused_within(url, key) -> float:
    """Seconds until the gateway answers 401 for `key` (fails past the deadline)."""
    started = time.monotonic()
    while (status := _status(url, key)) != 401:
        assert status == 200, f"unexpected {status}"
        assert time.monotonic() - started < REFUSAL_DEADLINE_SECONDS, "the gateway still accepts the key"
        time.sleep(0.2)
    return time.monotonic() - started


def test_admin_key_lifecycle_with_the_demo_agent(gateway, backend, page, admin_user, tenant, request):  # noqa: F811
    url, gw = gateway
    login(page, url, admin_user)
    overview = page.context.new_page()
    overview.javascript_errors = []
    overview.on("pageerror", lambda error: overview.javascript_errors.append(str(error)))
    overview.shoot = lambda name: overview.screenshot(
        path=str(ARTIFACTS / f"{request.node.name}-{name}.png"), full_page=True
    )
    overview.goto(f"{url}/")
    overview.wait_for_selector("body[data-live=subscribed]")
    assert overview.locator("#chart-traffic .main-svg").count() > 0, "Plotly drew the traffic chart"

    # 1. the admin creates a key for the agent
    page.goto(f"{url}/settings/keys/")
    page.fill("#create-key input[name=name]", "demo-agent")
    page.check("#create-key input[value=inference]")
    page.click("#create-key button[type=submit]")
    first_key = page.locator("#new-key").inner_text().strip()
    page.shoot("key-created")

    # 2. the demo agent uses it; the overview draws the calls live
    episode = _episode(url, first_key)
    assert episode.error is None, episode.error
    assert episode.completion_ids, episode.error
    drain(gw)
    overview.wait_for_function("(window.overviewLive.received['gateway.traffic'] || 0) >= 1", timeout=10_000)
    requests = overview.evaluate(
        "document.getElementById('chart-traffic').data[0].y.reduce((a, b) => a + b, 0)"
    )
    assert requests >= len(episode.completion_ids)
    overview.shoot("overview-live-traffic")

    # 3. rotation ending the old key now: the old key is refused, the new one works
    page.click("text=Back to API keys")
    row = page.locator(f"tr[data-prefix='{first_key[:12]}']")
    row.locator("select[name=grace_seconds]").select_option("0")
    row.locator("button:has-text('Rotate')").click()
    second_key = page.locator("#new-key").inner_text().strip()
    assert second_key != first_key
    page.shoot("key-rotated")
    _refused_within(url, first_key)
    assert _episode(url, first_key).error.startswith("AuthenticationError")
    episode = _episode(url, second_key, seed=1)
    assert episode.error is None, episode.error
    assert episode.completion_ids, episode.error

    # 4. the admin revokes the new key: the gateway refuses it
    page.click("text=Back to API keys")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"tr[data-prefix='{second_key[:12]}'] button.danger").click()
    page.wait_for_selector(".message")
    assert page.locator(f"tr[data-prefix='{second_key[:12]}'] .status").inner_text() == "revoked"
    page.shoot("key-revoked")
    _refused_within(url, second_key)
    refused = _episode(url, second_key)
    assert refused.error.startswith("AuthenticationError")
    assert not refused.completion_ids

    assert page.javascript_errors == []
    assert overview.javascript_errors == []
