"""LangChain's ChatOpenAI and a LangGraph tool loop, through the gateway with only base URL and key."""

import pytest

from tests.frameworks import checks, scenarios
from tests.frameworks.capture import REPLY

pytestmark = [pytest.mark.frameworks, pytest.mark.django_db(transaction=True)]


def test_a_langgraph_tool_loop_calls_the_tool_in_one_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.langgraph_tool_turn(url, key)
    assert run.weather_calls == [{"city": "Paris"}]
    assert run.texts == [REPLY]
    checks.assert_weather_tool_turn(checks.only_trajectory(api_client, gateway))


def test_chat_openai_streams_and_the_stream_is_recorded(serving, api_client):
    url, gateway, key = serving
    assert scenarios.langchain_streamed(url, key).texts == [REPLY]
    [step] = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=1)
    assert step["cost"]["ttft_ms"] is not None


def test_two_turns_of_a_langgraph_thread_are_one_trajectory(serving, api_client):
    url, gateway, key = serving
    assert scenarios.langgraph_two_turns(url, key).texts == [REPLY, REPLY]
    first, second = checks.assert_one_conversation(checks.only_trajectory(api_client, gateway), calls=2)
    assert [message["content"] for message in second["observation"]["messages"]] == [
        scenarios.HELLO,
        REPLY,
        scenarios.AND_THEN,
    ]
