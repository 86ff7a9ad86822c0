"""A session routed to a harness version (apps.evolution) through the official openai SDK and a real embedded
inference server: the harness-only version is served by the backends of the version whose weights it uses and
recorded under its own number; the model sees the harness (what the step records as its observation); a call
to a routed tool reaches the agent renamed, and the agent's history is shown to the model by the old name; a
disabled tool is absent; the prompt and tool versions are recorded and exported in ATDP. A version without a
harness is served unchanged."""

import copy

import anthropic
import openai
import pytest

from apps.audit.services import Actor
from apps.evolution.harness_versions import (
    harness_candidate_create,
    harness_version_create,
    version_serving_clear,
)
from apps.inference.models import BackendKind, BackendState
from apps.releases.models import RoutingState
from apps.releases.version_routing import routing_cache_clear, session_bucket
from apps.training.models import VersionStatus
from apps.training.services import model_version_register
from apps.trajectories.models import Step
from apps.trajectories.serialize import trajectory_to_atdp
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.releases.factories import RoutingStateFactory
from tests.workers.inference.conftest import WEATHER_QUESTION, WEATHER_TOOL
from workers.inference.modelgen import tokenizer_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)
SYSTEM = Actor.system("test")
TOOL_MODEL = "tool-model"
WEATHER_TOOL_V2 = copy.deepcopy(WEATHER_TOOL)
WEATHER_TOOL_V2["function"].update(name="get_weather_v2", description="Current weather, v2")
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time", "parameters": {"type": "object"}},
}
EXEMPLAR = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": "4 degrees."}]


def sdk(url, key, **kwargs):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, **kwargs)


def serve(tenant, *, name, model_dir, base_number, **harness):
    """Production version `base_number` of `name` (its backend carries that number) and, with `harness`,
    its harness-only candidate (the next number); the routing serves the candidate, else production."""
    base = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=name,
        checkpoint_path=str(model_dir),
        tokenizer_hash=tokenizer_fingerprint(model_dir),
        status=VersionStatus.PRODUCTION,
        number=base_number,
    )
    served = base
    if harness:
        version = harness_version_create(tenant=tenant, actor=SYSTEM, model=name, **harness)
        served = harness_candidate_create(
            tenant=tenant, actor=SYSTEM, harness=version, production_version=base
        )
    RoutingStateFactory(tenant=tenant, model=name, stable=served)
    routing_cache_clear()
    version_serving_clear()
    return served


@pytest.fixture
def tool_backend(tenant, tool_backend_url):
    return BackendFactory(
        tenant=tenant,
        name="tools",
        base_url=tool_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=TOOL_MODEL,
        model_version="0",
        state=BackendState.UP,
    )


def test_the_harness_system_prompt_and_exemplars_are_what_the_model_saw(
    gateway, backend, agent_key, tenant, default_model_dir
):
    served = serve(
        tenant,
        name=MODEL,
        model_dir=default_model_dir,
        base_number=1,  # the `backend` fixture serves version "1"
        system_prompt="Answer in one word.",
        exemplars=[EXEMPLAR],
    )
    assert served.number == 2
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Prompt-Version": "agent-7"})
    agent_messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(model=MODEL, messages=agent_messages, max_tokens=4)
    streamed = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count"}], max_tokens=4, stream=True
        )
    )
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert step.observation["messages"] == [
        {"role": "system", "content": "Answer in one word.\n\nYou are terse."},
        *EXEMPLAR,
        {"role": "user", "content": "Hi"},
    ]
    assert step.model_version == "2"  # the harness version's own number, served by version 1's backend
    assert step.backend_name == "embedded"
    assert step.state == {"prompt_version": "h1", "agent_prompt_version": "agent-7"}
    stream_step = Step.objects.get(pk=streamed[0].id)
    assert stream_step.observation["messages"][0] == {"role": "system", "content": "Answer in one word."}
    assert stream_step.model_version == "2"
    exported = trajectory_to_atdp(step.trajectory, [step], [])["steps"][0]["versions"]
    assert (exported["prompt_version"], exported["model_version"], exported["tools"]) == ("h1", "2", {})


def test_another_agents_requests_never_get_the_harness(
    gateway, backend, agent_key, tenant, default_model_dir
):
    """A harness is for one agent (the policy's): a request naming another agent, or none, routed to the very
    same version gets neither its prompt nor its exemplars (another agent's users' words)."""
    serve(
        tenant,
        name=MODEL,
        model_dir=default_model_dir,
        base_number=1,
        agent_name="forecaster",
        system_prompt="FORECASTER-ONLY prompt.",
        exemplars=[
            [{"role": "user", "content": "FORECASTER user 0042"}, {"role": "assistant", "content": "ok"}]
        ],
    )
    url, gw = gateway
    key = agent_key("inference")
    messages = [{"role": "user", "content": "Hi"}]
    replies = {
        agent: sdk(
            url, key, default_headers={"X-Agent-Name": agent} if agent else {}
        ).chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
        for agent in ("forecaster", "billing", "")
    }
    drain(gw)
    own = Step.objects.get(pk=replies["forecaster"].id)
    assert own.observation["messages"][0] == {"role": "system", "content": "FORECASTER-ONLY prompt."}
    assert own.state["prompt_version"] == "h1"
    for agent in ("billing", ""):
        step = Step.objects.get(pk=replies[agent].id)
        assert step.observation["messages"] == messages
        assert "FORECASTER" not in str(step.observation)
        assert "prompt_version" not in step.state
        assert step.model_version == "2"  # the same routed version, served by version 1's backend


def test_a_version_without_harness_is_served_unchanged(
    gateway, backend, agent_key, tenant, default_model_dir
):
    serve(tenant, name=MODEL, model_dir=default_model_dir, base_number=1)
    url, gw = gateway
    client = sdk(url, agent_key("inference"), default_headers={"X-Prompt-Version": "agent-7"})
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[TIME_TOOL], max_tokens=4, temperature=0
    )
    drain(gw)
    step = Step.objects.get(pk=reply.id)
    assert step.observation["messages"] == messages
    assert step.observation["tools"] == [TIME_TOOL]
    assert step.state == {"prompt_version": "agent-7"}
    assert step.model_version == "1"
    exported = trajectory_to_atdp(step.trajectory, [step], [])["steps"][0]["versions"]
    assert (exported["prompt_version"], exported["tools"]) == ("agent-7", {})


def test_a_routed_tool_call_reaches_the_agent_renamed_and_a_disabled_tool_is_not_seen(
    gateway, tool_backend, agent_key, tenant, tool_model_dir
):
    serve(
        tenant,
        name=TOOL_MODEL,
        model_dir=tool_model_dir,
        base_number=0,
        tool_routing={
            "get_weather": {"action": "route", "to": "get_weather_v2", "version": "2"},
            "get_time": {"action": "disable"},
        },
    )
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    offered = [WEATHER_TOOL, WEATHER_TOOL_V2, TIME_TOOL]
    reply = client.chat.completions.create(
        model=TOOL_MODEL, messages=WEATHER_QUESTION, tools=offered, temperature=0, max_tokens=40
    )
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather_v2"
    assert '"Paris"' in call.function.arguments

    followup = [
        *WEATHER_QUESTION,
        reply.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 18}'},
    ]
    second = client.chat.completions.create(model=TOOL_MODEL, messages=followup, tools=offered, max_tokens=4)
    stream = client.chat.completions.create(
        model=TOOL_MODEL, messages=WEATHER_QUESTION, tools=offered, temperature=0, max_tokens=40, stream=True
    )
    chunks = list(stream)
    streamed_names = [
        tool_call.function.name
        for chunk in chunks
        if chunk.choices
        for tool_call in chunk.choices[0].delta.tool_calls or []
        if tool_call.function and tool_call.function.name
    ]
    assert streamed_names == ["get_weather_v2"]
    drain(gw)

    first_step = Step.objects.get(pk=reply.id)
    assert first_step.observation["tools"] == [WEATHER_TOOL]  # get_time disabled, get_weather_v2 hidden
    assert first_step.observation["messages"] == WEATHER_QUESTION
    assert first_step.action["tool_calls"][0]["function"]["name"] == "get_weather"  # what the model produced
    assert first_step.state == {"prompt_version": "h1", "tool_versions": {"get_weather": "2"}}
    assert first_step.model_version == "1"
    assert first_step.backend_name == "tools"

    second_step = Step.objects.get(pk=second.id)
    assert second_step.trajectory_id == first_step.trajectory_id  # the renamed reply continues the session
    assert second_step.index == 1
    history_call = second_step.observation["messages"][1]["tool_calls"][0]
    assert history_call["function"]["name"] == "get_weather"  # the model's own name, as it saw it before

    stream_step = Step.objects.get(pk=chunks[0].id)
    assert stream_step.action["tool_calls"][0]["function"]["name"] == "get_weather"
    assert stream_step.observation["tools"] == [WEATHER_TOOL]

    exported = trajectory_to_atdp(first_step.trajectory, [first_step, second_step], [])["steps"]
    assert [step["versions"]["tools"] for step in exported] == [{"get_weather": "2"}] * 2
    assert [step["versions"]["prompt_version"] for step in exported] == ["h1", "h1"]


def test_anthropic_messages_get_the_harness_too(gateway, tool_backend, agent_key, tenant, tool_model_dir):
    serve(
        tenant,
        name=TOOL_MODEL,
        model_dir=tool_model_dir,
        base_number=0,
        tool_routing={"get_weather": {"action": "route", "to": "get_weather_v2", "version": "2"}},
    )
    url, gw = gateway
    client = anthropic.Anthropic(base_url=url, api_key=agent_key("inference"), max_retries=0)
    tools = [
        {
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "input_schema": tool["function"]["parameters"],
        }
        for tool in (WEATHER_TOOL, WEATHER_TOOL_V2)
    ]
    message = client.messages.create(
        model=TOOL_MODEL, max_tokens=40, messages=WEATHER_QUESTION, tools=tools, extra_body={"temperature": 0}
    )
    assert [block.name for block in message.content if block.type == "tool_use"] == ["get_weather_v2"]
    with client.messages.stream(
        model=TOOL_MODEL, max_tokens=40, messages=WEATHER_QUESTION, tools=tools, extra_body={"temperature": 0}
    ) as stream:
        final = stream.get_final_message()
    assert [block.name for block in final.content if block.type == "tool_use"] == ["get_weather_v2"]
    drain(gw)
    steps = list(Step.objects.filter(tenant=tenant, endpoint="messages").order_by("created_at"))
    assert len(steps) == 2
    for step in steps:
        assert [tool["function"]["name"] for tool in step.observation["tools"]] == ["get_weather"]
        assert step.action["tool_calls"][0]["function"]["name"] == "get_weather"
        assert step.state == {"prompt_version": "h1", "tool_versions": {"get_weather": "2"}}


def test_a_canary_of_a_harness_shares_the_backend_and_each_session_keeps_its_arm(
    gateway, backend, agent_key, tenant, default_model_dir
):
    """Both arms are served by version 1's one backend; the session's routed version decides the harness and
    the recorded version, on every turn, whether the gateway minted the session or the agent named it."""
    served = serve(
        tenant, name=MODEL, model_dir=default_model_dir, base_number=1, system_prompt="Answer in one word."
    )
    RoutingState.objects.filter(tenant=tenant, model=MODEL).update(
        stable=served.parent, canary=served, canary_percent=50
    )
    routing_cache_clear()
    names = [f"arm-{number}" for number in range(40)]
    to_canary = [name for name in names if session_bucket(tenant_id=tenant.pk, session_id=name) < 50][:2]
    to_stable = [name for name in names if session_bucket(tenant_id=tenant.pk, session_id=name) >= 50][:2]
    url, gw = gateway
    key = agent_key("inference")
    for session_id in to_canary + to_stable:
        client = sdk(url, key, default_headers={"X-Session-Id": session_id})
        messages = [{"role": "user", "content": f"Hello from {session_id}"}]
        first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "And?"},
        ]
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=3)
    minted = sdk(url, key)
    for number in range(6):
        minted.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"new {number}"}], max_tokens=2
        )
    drain(gw)
    steps = list(Step.objects.filter(tenant=tenant).select_related("trajectory"))
    assert len(steps) == 2 * 4 + 6
    for step in steps:
        harnessed = step.observation["messages"][0] == {"role": "system", "content": "Answer in one word."}
        assert step.model_version == ("2" if harnessed else "1")
        assert step.backend_name == "embedded"
        assert step.state == ({"prompt_version": "h1"} if harnessed else {})
        session_id = step.trajectory.session_id
        if session_id in to_canary + to_stable:
            assert harnessed == (session_id in to_canary)
    for step in steps:  # the sessions the gateway minted follow the same stable hash
        expected = session_bucket(tenant_id=tenant.pk, session_id=step.trajectory.session_id) < 50
        assert (step.model_version == "2") == expected
