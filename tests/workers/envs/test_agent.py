"""The demo agent, an unmodified openai-SDK client, against the real embedded inference server."""

import openai

from tests.workers.inference.conftest import default_model_dir, server  # noqa: F401  (fixtures)
from workers.envs import weather
from workers.envs.agent import run_episode


def test_an_episode_runs_against_a_real_server_and_is_judged(server):  # noqa: F811
    client = openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0)
    task = weather.make_tasks(split="train", count=1, seed=0)[0]
    episode = run_episode(client, model="default", task=task, max_tokens=16, temperature=1.0)
    assert episode.error is None
    assert episode.transcript[:2] == task.opening()
    assistant_turns = [message for message in episode.transcript if message["role"] == "assistant"]
    assert 1 <= len(assistant_turns) == len(episode.completion_ids) <= 3
    assert episode.outcome.reason in {
        "ok",
        "no tool call",
        "no final answer",
        "wrong city",
        "wrong temperature",
    }


def test_a_world_without_a_scenario_leaves_the_agents_episodes_exactly_as_they_were(server):  # noqa: F811
    from workers.envs.scenarios import World

    client = openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0)
    world = World().start()
    for task in weather.make_tasks(split="train", count=3, seed=5):
        plain = run_episode(client, model="default", task=task, max_tokens=16, temperature=0.0)
        in_world = run_episode(
            client, model="default", task=task, max_tokens=16, temperature=0.0, world=world
        )
        assert in_world.error is None
        assert in_world.transcript == plain.transcript
        assert in_world.outcome == plain.outcome
    assert world.events == []
