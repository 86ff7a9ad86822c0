import anthropic
import httpx
import pytest

from apps.trajectories.models import Step
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain, step_tokens

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]


def test_client_disconnect_mid_stream_leaves_an_aborted_step_with_tokens_so_far(
    gateway, backend, agent_key, tenant
):
    url, gw = gateway
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell a long story"}],
        "max_tokens": 400,
        "temperature": 1.0,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {agent_key('inference')}"},
    ) as response:
        received = 0
        for line in response.iter_lines():
            if line.startswith("data:"):
                received += 1
            if received == 3:
                break
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        drain(gw)
        step = Step.objects.filter(tenant=tenant).first()
        if step is not None:
            break
        time.sleep(0.2)
    assert step is not None
    assert step.aborted
    assert "disconnected" in step.error
    produced = len(step_tokens(step)["completion_ids"])
    assert 0 < produced < 400


def test_anthropic_sdk_through_the_gateway(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = anthropic.Anthropic(base_url=url, api_key=agent_key("inference"), max_retries=0)
    message = client.messages.create(
        model=MODEL, max_tokens=8, system="Be brief.", messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.role == "assistant"
    assert message.content
    assert message.stop_reason in {"end_turn", "max_tokens"}
    with client.messages.stream(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi again"}]
    ) as s:
        streamed_text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == streamed_text
    drain(gw)
    steps = list(Step.objects.filter(tenant=tenant, endpoint="messages").order_by("created_at"))
    assert len(steps) == 2
    assert steps[0].observation["messages"][0] == {"role": "system", "content": "Be brief."}
    assert step_tokens(steps[0])["completion_ids"]
    assert steps[1].action["text"] == streamed_text
    bad = httpx.post(
        f"{url}/v1/messages",
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": agent_key("inference"), "anthropic-version": "2023-06-01"},
    )
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
