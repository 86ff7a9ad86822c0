import json
import random

import pytest

from workers.envs import weather
from workers.envs.users import SimulatedAnnotator, SimulatedUser


def test_held_out_pairs_never_appear_in_training_tasks():
    train = {(task.city, task.temperature) for task in weather.make_tasks(split="train", count=2000, seed=1)}
    held = {(task.city, task.temperature) for task in weather.make_tasks(split="heldout", count=300, seed=1)}
    assert train
    assert held
    assert not train & held
    assert weather.make_tasks(split="train", count=5, seed=3) == weather.make_tasks(
        split="train", count=5, seed=3
    )
    with pytest.raises(ValueError, match="split is 'train' or 'heldout'"):
        weather.make_tasks(split="test", count=1, seed=0)


def test_the_scripted_episode_succeeds_and_the_tool_answers_only_the_asked_city():
    task = weather.Task("t", "Oslo", -3, "What is the temperature in Oslo?")
    assert weather.check(task, weather.scripted_episode(task)).success
    assert json.loads(weather.tool_result(task, "get_weather", '{"city": "oslo"}'))["temperature"] == -3
    assert "error" in json.loads(weather.tool_result(task, "get_weather", '{"city": "Rome"}'))
    assert "error" in json.loads(weather.tool_result(task, "get_weather", "not json"))
    assert "error" in json.loads(weather.tool_result(task, "add", "{}"))


def _episode(task, *, city, answer, call=True):
    messages = task.opening()
    if call:
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": "c",
                "content": weather.tool_result(task, "get_weather", {"city": city}),
            }
        )
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    return messages


@pytest.mark.parametrize(
    ("city", "answer", "call", "reason"),
    [
        ("Lima", "It is 21 degrees in Lima.", True, "ok"),
        ("Lima", "It is 12 degrees.", True, "wrong temperature"),
        ("Rome", "It is 21 degrees.", True, "wrong city"),
        ("Lima", None, True, "no final answer"),
        ("Lima", "21", False, "no tool call"),
    ],
)
def test_the_checker_names_what_went_wrong(city, answer, call, reason):
    task = weather.Task("t", "Lima", 21, "Tell me the weather in Lima.")
    outcome = weather.check(task, _episode(task, city=city, answer=answer, call=call))
    assert outcome.reason == reason
    assert outcome.success == (reason == "ok")


def test_simulated_users_are_right_but_noisy_and_correct_some_failures():
    task = weather.Task("t", "Lima", 21, "q")
    good = weather.check(task, _episode(task, city="Lima", answer="21 degrees"))
    bad = weather.check(task, _episode(task, city="Rome", answer="5"))
    rng = random.Random(0)
    user = SimulatedUser(noise=0.1, correction_rate=0.3)
    up_on_good = sum(user.react(task, good, rng).thumbs_up for _ in range(4000)) / 4000
    reactions = [user.react(task, bad, rng) for _ in range(4000)]
    assert 0.87 < up_on_good < 0.93
    assert 0.07 < sum(reaction.thumbs_up for reaction in reactions) / 4000 < 0.13
    corrections = [reaction.correction for reaction in reactions if reaction.correction]
    assert 0.27 < len(corrections) / 4000 < 0.33
    assert set(corrections) == {"It is 21 degrees."}
    annotator = SimulatedAnnotator(noise=0.0)
    assert annotator.label(good, rng) == 1.0
    assert annotator.label(bad, rng) == 0.0


def test_legacy_agent_has_the_skills_but_a_poor_habit():
    rng = random.Random(0)
    tasks = weather.make_tasks(split="train", count=400, seed=3)
    outcomes = [weather.check(task, weather.legacy_episode(task, rng)) for task in tasks]
    called = [outcome for outcome in outcomes if outcome.called_tool]
    assert all(outcome.success for outcome in called)  # when it calls the tool it does everything right
    assert 0.25 < len(called) / len(outcomes) < 0.45  # but it usually answers from memory
    assert sum(outcome.success for outcome in outcomes) / len(outcomes) < 0.5
    assert {outcome.reason for outcome in outcomes} >= {"ok", "no tool call"}
