"""Pydantic AI's OpenAIChatModel, through the gateway with only base URL and key (`OpenAIProvider`)."""

import pytest

from tests.frameworks import checks, scenarios
from tests.frameworks.capture import REPLY

pytestmark = [pytest.mark.frameworks, pytest.mark.django_db(transaction=True)]


def test_a_tool_is_called_and_the_run_is_one_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.pydantic_tool_turn(url, key)
    assert run.weather_calls == [{"city": "Paris"}]
    assert run.texts == [REPLY]
    checks.assert_weather_tool_turn(checks.only_trajectory(api_client, gateway))


def test_run_stream_streams_the_text_and_is_recorded(serving, api_client):
    url, gateway, key = serving
    assert scenarios.pydantic_streamed(url, key).texts == [REPLY]
    [step] = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=1)
    assert step["cost"]["ttft_ms"] is not None


def test_a_run_continued_with_its_message_history_is_one_trajectory(serving, api_client):
    url, gateway, key = serving
    assert scenarios.pydantic_two_turns(url, key).texts == [REPLY, REPLY]
    first, second = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=2)
    assert second["observation"]["messages"][-1]["content"] == scenarios.AND_THEN
