"""The scenarios' world: switched at run time by its clock or by hand, consulted by the traffic and the agent's
tools; the default world is the weather desk as it was; the degraded checkpoint helper."""

import json
import threading

import pytest

from workers.envs import weather
from workers.envs.scenarios import (
    FAULTY_CITIES,
    SCENARIOS,
    SHIFTED_QUESTION,
    WEATHER_V2,
    World,
    scenario_named,
    success_timeline,
    write_degraded_checkpoint,
)


class Clock:
    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _call(task, name, city):
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"city": city})},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "{}"},
        {"role": "assistant", "content": f"It is {task.temperature} degrees."},
    ]


def test_without_a_scenario_the_world_is_the_weather_desk_as_it_was():
    world = World().start()
    tasks = weather.make_tasks(split="train", count=50, seed=4)
    assert world.tools() is weather.TOOLS
    assert world.right_tools() == (weather.TOOL_NAME,)
    for task in tasks:
        assert world.shape(task) is task
        for name in (weather.TOOL_NAME, weather.FORECAST_TOOL, WEATHER_V2, "add"):
            for arguments in (json.dumps({"city": task.city}), {"city": "Rome"}, "not json"):
                assert world.tool_result(task, name, arguments) == weather.tool_result(task, name, arguments)
        transcript = task.opening() + _call(task, weather.TOOL_NAME, task.city)
        assert world.check(task, transcript) == weather.check(task, transcript)
    assert world.events == []
    assert world.summary()["name"] == "none"


def test_the_tool_failure_scenario_breaks_get_weather_for_some_cities_at_its_time_and_offers_v2():
    clock = Clock()
    world = World(SCENARIOS["tool_failure"], clock=clock).start()
    oslo = weather.Task("t1", "Oslo", 7, "Oslo: what is the temperature now?")
    paris = weather.Task("t2", "Paris", 9, "Paris: what is the temperature now?")
    assert [tool["function"]["name"] for tool in world.tools()] == [WEATHER_V2, weather.TOOL_NAME]
    assert json.loads(world.tool_result(oslo, weather.TOOL_NAME, '{"city": "Oslo"}'))["temperature"] == 7
    clock.now += 59.9
    assert "error" not in json.loads(world.tool_result(oslo, weather.TOOL_NAME, '{"city": "Oslo"}'))
    clock.now += 0.2
    assert json.loads(world.tool_result(oslo, weather.TOOL_NAME, '{"city": " oslo"}')) == {
        "error": "station oslo offline"
    }
    assert json.loads(world.tool_result(paris, weather.TOOL_NAME, '{"city": "Paris"}'))["temperature"] == 9
    # The second version works for every city and is judged a right tool.
    assert json.loads(world.tool_result(oslo, WEATHER_V2, '{"city": "Oslo"}')) == {
        "city": "Oslo",
        "temperature": 7,
    }
    assert world.check(oslo, oslo.opening() + _call(oslo, WEATHER_V2, "Oslo")).success
    assert not weather.check(oslo, oslo.opening() + _call(oslo, WEATHER_V2, "Oslo")).right_tool
    assert set(FAULTY_CITIES) < set(weather.CITIES)
    events = world.summary()["events"]
    assert [(event["what"], event["seconds"]) for event in events] == [
        ("advertise_tools", 0),
        ("tool_faults", 60),
    ]
    assert events[1]["at"] == 1_060.0
    assert events[1]["value"] == {"get_weather": list(FAULTY_CITIES)}


def test_drift_shifts_the_phrasing_and_the_task_ids_and_city_shift_moves_a_share_to_new_cities():
    clock = Clock()
    world = World(scenario_named("drift", at=10), clock=clock).start()
    tasks = weather.make_tasks(split="train", count=400, seed=2)
    assert [world.shape(task) for task in tasks] == tasks
    clock.now += 10
    shifted = [world.shape(task) for task in tasks]
    assert all(task.task_id.startswith("shifted-") for task in shifted)
    assert all(task.question == SHIFTED_QUESTION.format(city=task.city) for task in shifted)
    assert [(task.city, task.temperature) for task in shifted] == [
        (task.city, task.temperature) for task in tasks
    ]

    cities = World(SCENARIOS["drift_cities"], clock=clock).start()
    clock.now += 60
    moved = [cities.shape(task) for task in tasks]
    new = [task for task in moved if task.city in weather.NEW_CITIES]
    assert 0.65 < len(new) / len(moved) < 0.85
    assert not set(weather.NEW_CITIES) & set(weather.CITIES)
    assert all(task.question.startswith(f"{task.city}:") for task in moved)
    assert [cities.shape(task) for task in tasks] == moved  # the same task is shaped the same way
    sample = new[0]
    answer = json.loads(cities.tool_result(sample, weather.TOOL_NAME, {"city": sample.city}))
    assert answer == {"city": sample.city, "temperature": sample.temperature}


def test_switches_by_hand_a_bad_release_request_and_a_reset():
    clock = Clock()
    world = World(clock=clock).start()
    clock.now += 5
    world.switch("tool_faults", {weather.TOOL_NAME: ["Rome"]})
    rome = weather.Task("t", "Rome", 3, "Rome: what is the temperature now?")
    assert "offline" in world.tool_result(rome, weather.TOOL_NAME, {"city": "Rome"})
    world.switch("bad_release", {"noise": 0.5})
    assert world.take_requests("bad_release") == [
        {"what": "bad_release", "value": {"noise": 0.5}, "at": 1_005.0}
    ]
    assert world.take_requests("bad_release") == []
    world.switch("reset")
    assert world.tool_result(rome, weather.TOOL_NAME, {"city": "Rome"}) == weather.tool_result(
        rome, weather.TOOL_NAME, {"city": "Rome"}
    )
    assert [event["what"] for event in world.events] == ["tool_faults", "bad_release", "reset"]
    assert world.events[0]["seconds"] == 5
    with pytest.raises(ValueError, match="unknown switch"):
        world.switch("earthquake")
    with pytest.raises(ValueError, match="no such extra tool"):
        world.switch("offer_tools", ["get_time"])


def test_the_bad_release_comes_due_once_even_when_many_threads_consult_the_world():
    clock = Clock()
    world = World(scenario_named("bad_release", at=30), clock=clock).start()
    clock.now += 31
    task = weather.make_tasks(split="train", count=1, seed=0)[0]
    taken: list = []

    def consult():
        for _ in range(200):
            world.shape(task)
            world.tools()
            taken.extend(world.take_requests("bad_release"))

    threads = [threading.Thread(target=consult) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 1
    assert taken[0]["value"] == {"noise": 0.25, "seed": 0, "production_success": 0.5}
    assert [event["what"] for event in world.events] == ["bad_release"]
    clock.now += 4
    world.note("bad_release_sent", {"version": 7})
    assert world.events[-1] == {
        "what": "bad_release_sent",
        "value": {"version": 7},
        "seconds": 35,
        "at": 1_035,
    }


def test_every_scenario_states_what_it_expects_and_the_trigger_can_be_moved():
    assert set(SCENARIOS) >= {"tool_failure", "drift", "bad_release", "stationary"}
    for scenario in SCENARIOS.values():
        if scenario.expects.kinds:
            assert scenario.trigger() is not None
            assert scenario.expects.within_seconds > 0
            assert scenario.duration_seconds > scenario.trigger().at + scenario.expects.within_seconds
    stationary = SCENARIOS["stationary"]
    assert stationary.switches == ()
    assert stationary.expects.kinds == ()
    assert stationary.duration_seconds == 600
    moved = scenario_named("tool_failure", at=120)
    assert [switch.at for switch in moved.switches] == [0, 120]
    assert moved.duration_seconds == SCENARIOS["tool_failure"].duration_seconds + 60
    assert scenario_named("") is None
    assert scenario_named("none") is None
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario_named("flood")
    summary = World(SCENARIOS["bad_release"]).summary()
    assert summary["expects"]["kinds"] == ["rollback"]
    assert summary["expects"]["then"] == ["restart_learner"]
    assert summary["trigger_seconds"] == 60
    json.dumps(summary)


def test_success_timeline_buckets_the_traffic_history():
    history = [(100.0, True), (110.0, False), (131.0, True), (95.0, False)]
    assert success_timeline(history, started_at=100.0, bucket_seconds=30) == [
        {"seconds": 0.0, "episodes": 2, "success": 0.5},
        {"seconds": 30.0, "episodes": 1, "success": 1.0},
    ]


def test_a_degraded_checkpoint_keeps_the_layout_and_moves_every_weight(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    source = tmp_path / "production"
    source.mkdir()
    weights = {"layer.weight": torch.linspace(-1, 1, 64).reshape(8, 8), "steps": torch.arange(4)}
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    (source / "config.json").write_text('{"model_type": "llama"}')
    out = write_degraded_checkpoint(source, tmp_path / "bad", noise=0.5, seed=1)
    degraded = load_file(out / "model.safetensors")
    assert (out / "config.json").read_text() == '{"model_type": "llama"}'
    assert json.loads((out / "degraded.json").read_text())["noise"] == 0.5
    assert degraded["layer.weight"].shape == (8, 8)
    assert degraded["layer.weight"].dtype == torch.float32
    difference = (degraded["layer.weight"] - weights["layer.weight"]).std().item()
    assert (
        0.2 * weights["layer.weight"].std().item() < difference < 1.0 * weights["layer.weight"].std().item()
    )
    assert torch.equal(degraded["steps"], weights["steps"])
    again = load_file(
        write_degraded_checkpoint(source, tmp_path / "again", noise=0.5, seed=1) / "model.safetensors"
    )
    assert torch.equal(again["layer.weight"], degraded["layer.weight"])
    with pytest.raises(FileNotFoundError):
        write_degraded_checkpoint(tmp_path / "bad" / "nothing", tmp_path / "x")


def test_an_advertised_tool_joins_the_list_the_agent_sends():
    world = World().start()
    world.switch("offer_tools", [WEATHER_V2])
    assert world.tools() is weather.TOOLS
    assert world.right_tools() == (weather.TOOL_NAME, WEATHER_V2)
    world.switch("advertise_tools", [WEATHER_V2])
    assert [tool["function"]["name"] for tool in world.tools()] == [WEATHER_V2, weather.TOOL_NAME]
    world.switch("reset")
    assert world.tools() is weather.TOOLS
    assert world.right_tools() == (weather.TOOL_NAME,)
