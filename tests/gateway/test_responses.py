"""The Responses API (`/v1/responses`) through the official openai SDK, to a real embedded inference server:
each call is translated to chat completions and recorded as an ATDP step with the backend's token ids and
logprobs; conversations continue by their input items or by `previous_response_id`, one trajectory."""

import httpx
import openai
import pytest

from apps.gateway.models import StoredResponse
from apps.trajectories.models import Step, Trajectory
from apps.trajectories.selectors import trajectory_with_records
from apps.trajectories.serialize import trajectory_record
from tests.gateway.conftest import MODEL
from tests.gateway.helpers import drain, only_trajectory, step_tokens
from workers.atdp.training_view import training_samples

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("pii_off")]


WEATHER_FUNCTION = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def sdk(url, key, **kwargs):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, **kwargs)


def step_of(response) -> Step:
    assert response.id.startswith("resp_")
    return Step.objects.get(pk=response.id.removeprefix("resp_"))


@pytest.fixture
def tool_backend(tenant, tool_backend_url):
    from apps.inference.models import BackendState
    from tests.inference.factories import BackendFactory

    return BackendFactory(
        tenant=tenant,
        name="tools",
        base_url=tool_backend_url,
        served_model="tool-model",
        state=BackendState.UP,
    )


def test_a_response_is_recorded_with_the_backends_tokens(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    raw = client.responses.with_raw_response.create(
        model=MODEL, input="Say hello", instructions="Be brief.", max_output_tokens=12, temperature=0
    )
    response = raw.parse()
    drain(gw)
    step = step_of(response)
    assert step.endpoint == "responses"
    assert step.trajectory.session_id == raw.headers["x-session-id"]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    assert step.observation["messages"] == messages
    backend_view = httpx.post(
        f"{backend.base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": messages,
            "max_tokens": 12,
            "temperature": 0,
            "return_token_ids": True,
            "logprobs": True,
        },
    ).json()
    tokens = step_tokens(step)
    assert tokens["prompt_ids"] == backend_view["prompt_token_ids"]
    assert tokens["completion_ids"] == backend_view["choices"][0]["token_ids"]
    expected = [entry["logprob"] for entry in backend_view["choices"][0]["logprobs"]["content"]]
    assert tokens["completion_logprobs"] == pytest.approx(expected, abs=1e-5)
    assert response.object == "response"
    assert response.status in ("completed", "incomplete")
    assert response.output[0].type == "message"
    assert step.action["text"] == response.output_text  # PII off: stored as generated
    assert response.usage.output_tokens == len(tokens["completion_ids"]) == step.completion_tokens
    assert response.usage.input_tokens == len(tokens["prompt_ids"])
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.instructions == "Be brief."
    assert response.max_output_tokens == 12


def test_streaming_sends_the_responses_event_sequence(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    events = list(client.responses.create(model=MODEL, input="Count", max_output_tokens=16, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert final.output_text == text == events[-4].text
    drain(gw)
    step = step_of(final)
    assert events[0].response.id == final.id
    assert step.action["text"] == text  # PII off: stored as generated
    assert final.usage.output_tokens == len(step_tokens(step)["completion_ids"]) == step.completion_tokens > 0
    assert step.ttft_ms is not None
    assert not step.aborted


def test_two_turns_by_input_items_are_one_trajectory(gateway, backend, agent_key, tenant):
    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    history = [{"role": "user", "content": "Hello"}]
    first = client.responses.create(model=MODEL, input=history, max_output_tokens=8, temperature=0)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"role": "user", "content": "And then?"})
    second = client.responses.create(
        model=MODEL, input=history, max_output_tokens=8, temperature=0, stream=True
    )
    second_id = list(second)[-1].response.id
    client.responses.create(model=MODEL, input="Unrelated", max_output_tokens=4)
    drain(gw)
    one, two = step_of(first), Step.objects.get(pk=second_id.removeprefix("resp_"))
    assert one.trajectory_id == two.trajectory_id
    assert (one.index, two.index) == (0, 1)
    assert two.parent_step_id == one.pk
    assert two.observation["messages"][1] == {"role": "assistant", "content": first.output_text}
    assert Trajectory.objects.filter(tenant=tenant).count() == 2


def test_previous_response_id_continues_the_conversation_within_the_tenant(
    gateway, backend, agent_key, tenant, other_tenant
):
    url, gw = gateway
    key = agent_key("inference")
    client = sdk(url, key)
    first = client.responses.create(model=MODEL, input="Hello", instructions="Old.", max_output_tokens=6)
    assert first.store is True
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input="And then?",
        instructions="New.",
        max_output_tokens=6,
    )
    assert second.previous_response_id == first.id
    drain(gw)
    one, two = step_of(first), step_of(second)
    assert two.trajectory_id == one.trajectory_id
    assert two.index == 1
    assert two.observation["messages"] == [
        {"role": "system", "content": "New."},  # this request's instructions only, as OpenAI does
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And then?"},
    ]
    fetched = client.responses.retrieve(second.id)
    assert fetched.model_dump() == second.model_dump()

    stranger = sdk(url, agent_key("inference", of=other_tenant))
    with pytest.raises(openai.NotFoundError) as refused:
        stranger.responses.retrieve(first.id)
    assert refused.value.body["code"] == "response_not_found"
    steps_before = Step.objects.count()
    with pytest.raises(openai.NotFoundError) as refused:
        stranger.responses.create(model=MODEL, previous_response_id=first.id, input="x", max_output_tokens=2)
    assert refused.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        stranger.responses.delete(first.id)
    drain(gw)
    assert Step.objects.count() == steps_before
    assert StoredResponse.objects.filter(tenant=tenant).count() == 2

    unstored = client.responses.create(model=MODEL, input="x", max_output_tokens=2, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_a_function_call_and_its_output_round_trip(gateway, tool_backend, agent_key, tenant):
    from tests.workers.inference.conftest import WEATHER_QUESTION

    url, gw = gateway
    client = sdk(url, agent_key("inference"))
    first = client.responses.create(
        model="tool-model",
        input=WEATHER_QUESTION,
        tools=[WEATHER_FUNCTION],
        temperature=0,
        max_output_tokens=40,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert '"Paris"' in call.arguments
    follow_up = [
        *WEATHER_QUESTION,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 18}'},
    ]
    events = list(
        client.responses.create(
            model="tool-model", input=follow_up, tools=[WEATHER_FUNCTION], max_output_tokens=8, stream=True
        )
    )
    assert events[-1].type in ("response.completed", "response.incomplete")
    drain(gw)
    one, two = step_of(first), step_of(events[-1].response)
    assert one.action["tool_calls"][0]["function"]["name"] == "get_weather"
    assert one.result["finish_reason"] == "tool_calls"
    assert two.trajectory_id == one.trajectory_id
    assert two.index == 1
    assert two.observation["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": '{"temperature_c": 18}',
    }
    # the second prompt is the first prompt and its completion, token for token: one training sample
    first_tokens, second_tokens = step_tokens(one), step_tokens(two)
    turn = first_tokens["prompt_ids"] + first_tokens["completion_ids"]
    assert second_tokens["prompt_ids"][: len(turn)] == turn
    only_trajectory(tenant)
    [trajectory] = trajectory_with_records(Trajectory.objects.filter(tenant=tenant), tenant=tenant)
    [sample] = training_samples(trajectory_record(trajectory))
    assert sample["step_ids"] == [str(one.pk), str(two.pk)]


def test_the_event_stream_of_text_then_a_call_and_of_a_backend_failure():
    """The translation alone (no server): a text then a streamed tool call become two output items in order,
    the final response the same a whole answer gives; a failure mid-stream is `error` then `response.failed`."""
    from apps.gateway import responses_wire
    from apps.gateway.responses_stream import ChatStreamToResponseEvents

    skeleton = responses_wire.response_skeleton({"model": "m"}, response_id="resp_1", store=True)
    stream = ChatStreamToResponseEvents(skeleton)
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "Let me check."}, "token_ids": [1, 2]}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_9",
                                "function": {"name": "get_weather", "arguments": '{"city": '},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 9}},
    ]
    events = [event for chunk in chunks for event in stream.feed(chunk)] + stream.finish()
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",  # the message closes before the call opens
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"city": "Paris"}'
    assert final["output"][1]["call_id"] == "call_9"
    assert final["usage"]["total_tokens"] == 16
    whole = responses_wire.chat_response_to_response(
        {
            "choices": [
                {
                    "message": {
                        "content": "Let me check.",
                        "tool_calls": [
                            {
                                "id": "call_9",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 9},
        },
        skeleton,
    )
    strip = lambda response: [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]  # noqa: E731
    assert strip(whole) == strip(final)

    broken = ChatStreamToResponseEvents(skeleton)
    broken.feed(chunks[0])
    failed = broken.fail(message="the engine failed", code="backend_error")
    assert [event["type"] for event in failed] == ["error", "response.failed"]
    assert failed[0]["message"] == "the engine failed"
    assert failed[1]["response"]["status"] == "failed"
