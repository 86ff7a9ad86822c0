"""The official openai SDK through the gateway to a real embedded inference server: every turn becomes
an ATDP step with the backend's exact token ids and logprobs."""

import httpx
import openai
import pytest

from apps.trajectories.models import Step, Trajectory
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain, only_trajectory, step_tokens

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]


def sdk(url, key, **kwargs):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, **kwargs)


def test_chat_completion_is_recorded_with_the_backends_tokens(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=12, temperature=0
    )
    reply = raw.parse()
    session_id = raw.headers["x-session-id"]
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert step.trajectory.session_id == session_id
    assert step.index == 0
    tokens = step_tokens(step)
    backend_view = httpx.post(
        f"{backend.base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say hello"}],
            "max_tokens": 12,
            "temperature": 0,
            "return_token_ids": True,
            "logprobs": True,
        },
    ).json()
    assert tokens["completion_ids"] == backend_view["choices"][0]["token_ids"]
    assert tokens["prompt_ids"] == backend_view["prompt_token_ids"]
    expected = [entry["logprob"] for entry in backend_view["choices"][0]["logprobs"]["content"]]
    assert tokens["completion_logprobs"] == pytest.approx(expected, abs=1e-5)
    assert step.completion_tokens == len(tokens["completion_ids"]) == reply.usage.completion_tokens
    assert step.observation["messages"] == [{"role": "user", "content": "Say hello"}]
    assert step.action["text"] == reply.choices[0].message.content
    assert step.model_version == "1"
    assert step.backend_name == "embedded"
    assert step.latency_ms > 0


def test_streaming_passes_tokens_through_and_records_the_whole_completion(
    gateway, backend, agent_key, tenant
):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count"}],
        max_tokens=16,
        temperature=0,
        stream=True,
    )
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    drain(gw)
    step = Step.objects.get(pk=chunks[0].id)
    assert step.action["text"] == text
    assert len(step_tokens(step)["completion_ids"]) == step.completion_tokens > 0
    assert step.ttft_ms is not None
    assert step.ttft_ms <= step.latency_ms
    assert not step.aborted


def test_multi_turn_conversation_joins_one_trajectory_by_message_prefix(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    messages = [{"role": "user", "content": "Hello"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And then?"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Unrelated"}], max_tokens=4
    )
    drain(gw)
    one, two = Step.objects.get(pk=first.id), Step.objects.get(pk=second.id)
    assert one.trajectory_id == two.trajectory_id
    assert (one.index, two.index) == (0, 1)
    assert str(two.parent_step_id) == first.id
    assert Trajectory.objects.filter(tenant=tenant).count() == 2


def test_a_retried_turn_is_marked_not_branched(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Session-Id": "retry-session"})
    messages = [{"role": "user", "content": "Hello"}]
    first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    drain(gw)
    retry = Step.objects.get(pk=again.id)
    assert str(retry.retry_of) == first.id
    assert retry.parent_step_id is None


def test_session_header_and_session_url_attribute_sessions(gateway, backend, agent_key, tenant):
    url, gw = gateway
    key = agent_key("inference")
    by_header = sdk(url, key, default_headers={"X-Session-Id": "s-header"})
    by_url = openai.OpenAI(base_url=f"{url}/s/s-url/v1", api_key=key, max_retries=0)
    for client in (by_header, by_url, by_header):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    drain(gw)
    counts = dict(Trajectory.objects.filter(tenant=tenant).values_list("session_id", "step_count"))
    assert counts == {"s-header": 2, "s-url": 1}


def test_completions_and_models_endpoints(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    assert [model.id for model in client.models.list()] == [MODEL]
    completion = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6)
    drain(gw)
    step = Step.objects.get(pk=completion.id)
    assert step.endpoint == "completions"
    assert len(step_tokens(step)["completion_ids"]) == step.completion_tokens


def test_tool_calls_round_trip_and_are_recorded(gateway, tenant, agent_key, tool_backend_url):
    from apps.inference.models import BackendState
    from tests.inference.factories import BackendFactory
    from tests.workers.inference.conftest import WEATHER_QUESTION, WEATHER_TOOL

    BackendFactory(
        tenant=tenant,
        name="tools",
        base_url=tool_backend_url,
        served_model="tool-model",
        state=BackendState.UP,
    )
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    reply = client.chat.completions.create(
        model="tool-model", messages=WEATHER_QUESTION, tools=[WEATHER_TOOL], temperature=0, max_tokens=40
    )
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert '"Paris"' in call.function.arguments
    followup = [
        *WEATHER_QUESTION,
        reply.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 18}'},
    ]
    stream = client.chat.completions.create(
        model="tool-model", messages=followup, tools=[WEATHER_TOOL], max_tokens=8, stream=True
    )
    second_id = next(iter(stream)).id
    list(stream)
    drain(gw)
    first_step, second_step = Step.objects.get(pk=reply.id), Step.objects.get(pk=second_id)
    assert first_step.action["tool_calls"][0]["function"]["name"] == "get_weather"
    assert first_step.result["finish_reason"] == "tool_calls"
    assert second_step.trajectory_id == first_step.trajectory_id
    assert second_step.index == 1
    assert second_step.observation["messages"][-1]["role"] == "tool"
    assert only_trajectory(tenant).step_count == 2
