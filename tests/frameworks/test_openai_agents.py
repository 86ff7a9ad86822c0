"""The OpenAI Agents SDK in its default mode (the Responses API), through the gateway with only base URL and
key (`set_default_openai_client`)."""

import pytest

from tests.frameworks import checks, scenarios
from tests.frameworks.capture import REPLY

pytestmark = [pytest.mark.frameworks, pytest.mark.django_db(transaction=True)]


def test_a_function_tool_is_called_and_the_run_is_one_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.agents_tool_turn(url, key)
    assert run.weather_calls == [{"city": "Paris"}]
    assert run.texts == [REPLY]
    checks.assert_weather_tool_turn(checks.only_trajectory(api_client, gateway))


def test_a_streamed_run_streams_text_deltas_and_is_recorded(serving, api_client):
    url, gateway, key = serving
    assert scenarios.agents_streamed(url, key).texts == [REPLY, REPLY]
    [step] = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=1)
    assert step["cost"]["ttft_ms"] is not None


def test_a_run_and_its_follow_up_are_one_trajectory(serving, api_client):
    url, gateway, key = serving
    assert scenarios.agents_two_turns(url, key).texts == [REPLY, REPLY]
    first, second = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=2)
    assert second["observation"]["messages"][-1]["content"] == scenarios.AND_THEN
