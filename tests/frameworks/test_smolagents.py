"""smolagents' ToolCallingAgent with its default prompts (a ~2,000-token system prompt; the final answer is a
`final_answer` tool call), through the gateway with only base URL and key (`OpenAIServerModel`). It re-writes
its history as text, so a run names its session in the base URL (`/s/<session id>/v1`, scenarios.py)."""

import pytest

from tests.frameworks import checks, scenarios
from tests.frameworks.capture import REPLY

pytestmark = [pytest.mark.frameworks, pytest.mark.django_db(transaction=True)]


def test_a_tool_call_then_the_final_answer_are_one_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.smolagents_tool_turn(url, key)
    assert run.weather_calls == [{"city": "Paris"}]
    assert run.texts == [REPLY]
    record = checks.only_trajectory(api_client, gateway, session_id=run.session_id)
    first, second = checks.assert_one_conversation(record, calls=2, merged=False)
    assert first["action"]["tool_calls"][0]["function"]["name"] == checks.WEATHER
    assert second["action"]["tool_calls"][0]["function"]["name"] == "final_answer"
    # smolagents re-writes the call and its result as text ("Calling tools: ...", "Observation: ...")
    assert "temperature_c" in checks.message_text(second["observation"]["messages"][-1])


def test_streamed_outputs_are_recorded(serving, api_client):
    url, gateway, key = serving
    deltas, final = scenarios.smolagents_streamed(url, key).texts
    assert deltas > 0
    assert final == REPLY
    [step] = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=1)
    assert step["cost"]["ttft_ms"] is not None


def test_a_run_continued_without_reset_is_one_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.smolagents_two_turns(url, key)
    assert run.texts == [REPLY, REPLY]
    record = checks.only_trajectory(api_client, gateway, session_id=run.session_id)
    first, second = checks.assert_one_conversation(record, calls=2, merged=False)
    assert scenarios.AND_THEN in checks.message_text(second["observation"]["messages"][-1])
