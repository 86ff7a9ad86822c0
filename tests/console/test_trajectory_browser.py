"""An agent talks through the gateway with the official openai SDK; a person then finds the conversation in
the trajectory browser of a real headless Chromium and reads its steps, tool calls and tokens."""

import json

import openai
import pytest

from tests.browser_support import browser, page  # noqa: F401  (fixtures)
from tests.gateway.conftest import (  # noqa: F401  (fixtures)
    MODEL,
    agent_key,
    backend,
    embedded_backend_url,
    gateway,
)
from tests.gateway.helpers import drain
from tests.tenants.factories import PASSWORD
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Find an order",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    },
}


def _conversation(url: str, key: str) -> str:
    """Two turns of one session, the second carrying a tool call and its result."""
    client = openai.OpenAI(
        base_url=f"{url}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Session-Id": "browser-session", "X-Agent-Name": "support-bot"},
    )
    messages = [{"role": "user", "content": "Where is order 77?"}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[LOOKUP_TOOL], max_tokens=8, temperature=0
    )
    messages += [
        {
            "role": "assistant",
            "content": first.choices[0].message.content or "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": json.dumps({"order": "77"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped on Monday"},
    ]
    client.chat.completions.create(
        model=MODEL, messages=messages, tools=[LOOKUP_TOOL], max_tokens=8, temperature=0
    )
    return "browser-session"


def test_operator_browses_a_recorded_conversation(gateway, backend, agent_key, page, member, tenant):  # noqa: F811
    url, gw = gateway
    session_id = _conversation(url, agent_key("inference"))
    drain(gw)
    operator = member("operator")

    page.goto(f"{url}/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    page.click("nav.mainnav >> text=Trajectories")
    row = page.locator("tr", has_text=session_id)
    assert "support-bot" in row.inner_text()
    page.shoot("trajectory-list")

    row.locator("a").first.click()
    page.wait_for_selector("ol.timeline")
    assert session_id in page.locator("h1").inner_text()
    steps = page.locator("li.step")
    assert steps.count() == 2
    second = steps.nth(1)
    assert "lookup_order" in second.inner_text()
    assert "shipped on Monday" in second.inner_text()
    second.locator("summary", has_text="Completion tokens").click()
    assert second.locator(".token").count() > 0
    assert page.locator("#replay-target").count() == 1  # operators may replay
    page.shoot("trajectory-detail")
    assert page.javascript_errors == []
