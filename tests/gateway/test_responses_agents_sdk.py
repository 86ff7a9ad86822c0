"""The OpenAI Agents SDK (openai-agents, pinned in the dev extra) in its default mode, the Responses API,
with only its base URL and key changed, against the real gateway and embedded server: each model call is a
recorded step with token ids and logprobs, and a run and its follow-up are one trajectory. Tracing is off
and every connection off this machine is refused before it is made."""

import asyncio
import json
import os
import socket

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

agents = pytest.importorskip("agents")  # the dev extra (make install)

from apps.trajectories.models import Step, Trajectory  # noqa: E402
from tests.gateway.helpers import drain, only_trajectory, step_tokens  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]

TERSE = "terse-model"


@pytest.fixture(scope="session")
def terse_backend_url(tool_model_dir, tmp_path_factory):
    """An embedded server over a model that ends its turns (tests/gateway/terse_model.py): the Agents SDK
    fails a turn cut at its token cap, as OpenAI's `incomplete` status says."""
    from tests.gateway.terse_model import make_terse_model
    from tests.servers import inference_server

    model_dir = make_terse_model(tool_model_dir, tmp_path_factory.mktemp("models") / "terse")
    with inference_server(
        model_dir, served_model=TERSE, log_path=tmp_path_factory.mktemp("logs") / "terse.log"
    ) as url:
        yield url


@pytest.fixture
def terse_backend(tenant, terse_backend_url):
    from apps.inference.models import BackendState
    from tests.inference.factories import BackendFactory

    return BackendFactory(
        tenant=tenant,
        name="terse",
        base_url=terse_backend_url,
        served_model=TERSE,
        model_version="1",
        state=BackendState.UP,
    )


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Refuses, before connecting, any connection that is not to this machine (the SDK's tracing and any
    other call home)."""
    original = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            raise ConnectionRefusedError(f"test refuses a connection to {host}")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    agents.set_tracing_disabled(True)


def model_for(url, key, name=TERSE):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    return agents.OpenAIResponsesModel(model=name, openai_client=client)


def assert_token_step(step: Step) -> None:
    tokens = step_tokens(step)
    assert step.endpoint == "responses"
    assert tokens["prompt_ids"]
    assert tokens["completion_ids"]
    assert len(tokens["completion_logprobs"]) == len(tokens["completion_ids"]) == step.completion_tokens


def test_a_run_and_its_follow_up_are_one_trajectory(gateway, terse_backend, agent_key, tenant):
    url, gw = gateway
    agent = agents.Agent(
        name="greeter",
        instructions="You are terse.",
        model=model_for(url, agent_key("inference")),
        model_settings=agents.ModelSettings(max_tokens=16, temperature=0),
    )
    first = agents.Runner.run_sync(agent, "Hello")
    follow_up = first.to_input_list() + [{"role": "user", "content": "And then?"}]
    second = agents.Runner.run_sync(agent, follow_up)
    drain(gw)
    trajectory = only_trajectory(tenant)
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    assert [step.index for step in steps] == [0, 1]
    for step in steps:
        assert_token_step(step)
    assert steps[1].parent_step_id == steps[0].pk
    assert steps[0].observation["messages"][0] == {"role": "system", "content": "You are terse."}
    assert steps[1].observation["messages"][-1] == {"role": "user", "content": "And then?"}
    assert [first.last_response_id, second.last_response_id] == [f"resp_{step.pk}" for step in steps]


def test_a_streamed_run_is_recorded(gateway, terse_backend, agent_key, tenant):
    url, gw = gateway
    agent = agents.Agent(
        name="streamer",
        instructions="Count.",
        model=model_for(url, agent_key("inference")),
        model_settings=agents.ModelSettings(max_tokens=12),
    )

    async def run():
        result = agents.Runner.run_streamed(agent, "One, two")
        kinds = [event.type async for event in result.stream_events()]
        return result, kinds

    result, kinds = asyncio.run(run())
    assert "raw_response_event" in kinds
    drain(gw)
    [step] = Step.objects.filter(tenant=tenant)
    assert_token_step(step)
    assert result.last_response_id == f"resp_{step.pk}"
    assert step.ttft_ms is not None


def test_a_tool_calling_run_calls_the_tool_and_stays_one_trajectory(
    gateway, terse_backend, agent_key, tenant
):
    from tests.workers.inference.conftest import WEATHER_QUESTION, WEATHER_TOOL

    url, gw = gateway
    calls = []

    async def get_weather(context, arguments: str) -> str:
        calls.append(json.loads(arguments))
        return '{"temperature_c": 18}'

    tool = agents.FunctionTool(
        name="get_weather",
        description=WEATHER_TOOL["function"]["description"],
        params_json_schema=WEATHER_TOOL["function"]["parameters"],
        on_invoke_tool=get_weather,
        strict_json_schema=False,
    )
    agent = agents.Agent(
        name="weather",
        model=model_for(url, agent_key("inference")),
        tools=[tool],
        model_settings=agents.ModelSettings(max_tokens=40, temperature=0),
    )
    result = agents.Runner.run_sync(agent, WEATHER_QUESTION[0]["content"], max_turns=3)
    assert calls == [{"city": "Paris"}]
    assert result.final_output == "OK."
    drain(gw)
    trajectory = only_trajectory(tenant)
    steps = list(Step.objects.filter(trajectory=trajectory).order_by("index"))
    assert len(steps) == 2
    assert Trajectory.objects.filter(tenant=tenant).count() == 1
    for step in steps:
        assert_token_step(step)
    assert steps[0].action["tool_calls"][0]["function"]["name"] == "get_weather"
    assert steps[1].observation["messages"][-1]["role"] == "tool"
    assert steps[1].observation["messages"][-1]["content"] == '{"temperature_c": 18}'
