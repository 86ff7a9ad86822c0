"""AReaL's own OpenAIProxyClient (areal 1.0.4, tests/frameworks/areal_client.py), pointed at the gateway with
only its base URL and the tenant's key as its admin key: start_session, the agent's calls with the session's
key, set_reward on a completion and on the last one, and end_session when the block ends."""

import pytest

from tests.frameworks import checks, scenarios
from tests.frameworks.capture import REPLY

pytestmark = [pytest.mark.frameworks, pytest.mark.django_db(transaction=True)]


def test_a_session_with_rewards_ends_as_one_complete_trajectory(serving, api_client):
    url, gateway, key = serving
    run = scenarios.areal_session(url, key)
    assert run.texts == [REPLY, REPLY]
    record = checks.only_trajectory(api_client, gateway, session_id=run.session_id)
    assert (record["status"], record["task_id"]) == ("complete", "greeting")
    first, second = checks.assert_one_conversation(record, calls=2)
    assert [first["step_id"], second["step_id"]] == run.completion_ids
    rewards = {(reward["step_id"], reward["value"], reward["source"]) for reward in record["rewards"]}
    assert rewards == {(first["step_id"], 0.25, "agent"), (second["step_id"], 1.0, "agent")}
