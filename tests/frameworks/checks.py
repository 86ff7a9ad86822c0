"""What a framework's run left in the product, read the way a user reads it: the tenant's trajectories through
the REST API (ATDP records), and the training samples workers.rl builds from such a record."""

from tests.gateway.helpers import drain
from workers.rl.samples import trajectory_samples

WEATHER = "get_weather"


def trajectories(api_client, gateway) -> list[dict]:
    """The tenant's ATDP records, after the gateway's journal is flushed."""
    drain(gateway)
    reply = api_client(["trajectories:read"]).get("/api/v1/trajectories/", {"page_size": 200})
    assert reply.status_code == 200, reply.content
    return reply.json()["results"]


def only_trajectory(api_client, gateway, *, session_id: str | None = None) -> dict:
    """The tenant's one trajectory (of that session, where one is named)."""
    records = trajectories(api_client, gateway)
    assert len(records) == 1, [(record["trajectory_id"], len(record["steps"])) for record in records]
    if session_id is not None:
        assert records[0]["session_id"] == session_id
    return records[0]


def assert_token_data(step: dict) -> None:
    """A recorded model call with the backend's token ids and the logprob of every generated token."""
    tokens = step["tokens"]
    assert tokens is not None, step
    assert tokens["prompt_ids"]
    assert tokens["completion_ids"]
    assert len(tokens["completion_logprobs"]) == len(tokens["completion_ids"])
    assert all(logprob <= 0 for logprob in tokens["completion_logprobs"])
    assert step["cost"]["completion_tokens"] == len(tokens["completion_ids"])


def assert_one_conversation(record: dict, calls: int, *, merged: bool = True) -> list[dict]:
    """The record holds `calls` model calls, each with token data, each the child of the one before, and
    (`merged`) they merge into one training sample on their exact token prefixes; a framework that re-writes
    its history as text (smolagents) gives one sample per call instead. Returns the steps in order."""
    steps = sorted(record["steps"], key=lambda step: step["index"])
    assert [step["index"] for step in steps] == list(range(calls))
    for step in steps:
        assert_token_data(step)
    assert [step["parent_step_id"] for step in steps] == [None] + [step["step_id"] for step in steps[:-1]]
    samples = trajectory_samples(record, require_reward=False).samples
    ids = [step["step_id"] for step in steps]
    assert [sample.step_ids for sample in samples] == ([tuple(ids)] if merged else [(i,) for i in ids])
    return steps


def assert_weather_tool_turn(record: dict) -> None:
    """A tool-calling turn: the model called get_weather for Paris, the framework ran it, and the call that
    read the tool's result is the same conversation's next step."""
    first, second = assert_one_conversation(record, calls=2)
    [call] = first["action"]["tool_calls"]
    assert call["function"]["name"] == WEATHER
    assert "Paris" in call["function"]["arguments"]
    assert any("temperature_c" in message_text(message) for message in second["observation"]["messages"])
    assert any(tool["function"]["name"] == WEATHER for tool in first["observation"]["tools"])


def message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
