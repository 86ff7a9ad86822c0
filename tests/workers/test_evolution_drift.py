import math

import pytest

from workers.evolution.drift import (
    DRIFT_THRESHOLD,
    TrafficSample,
    drift,
    js_divergence,
    profile,
    prompt_bucket,
    psi,
    task_prefix,
)


def test_js_of_the_same_distribution_is_zero_and_of_disjoint_ones_is_one():
    assert js_divergence({"a": 3, "b": 1}, {"a": 6, "b": 2}) == 0
    assert js_divergence({"a": 1}, {"b": 5}) == 1


def test_js_on_a_hand_computed_pair():
    # P = (1, 0), Q = (½, ½), M = (¾, ¼): ½·log2(1/¾) + ½·(½·log2(½/¾) + ½·log2(½/¼))
    expected = 0.5 * math.log2(4 / 3) + 0.5 * (0.5 * math.log2(2 / 3) + 0.5 * math.log2(2))
    assert js_divergence({"a": 1}, {"a": 1, "b": 1}) == pytest.approx(expected)
    assert expected == pytest.approx(0.311278, abs=1e-6)


def test_js_is_symmetric_and_smoothing_pulls_disjoint_below_one():
    p, q = {"a": 2, "b": 1}, {"b": 1, "c": 4}
    assert js_divergence(p, q) == pytest.approx(js_divergence(q, p))
    assert js_divergence({"a": 1}, {"b": 1}, smoothing=1.0) < 1


def test_psi_on_a_hand_computed_pair_and_its_floor():
    # P = (½, ½), Q = (¼, ¾): (¼−½)·ln(½) + (¾−½)·ln(3/2)
    expected = -0.25 * math.log(0.5) + 0.25 * math.log(1.5)
    assert psi({"a": 1, "b": 1}, {"a": 1, "b": 3}) == pytest.approx(expected)
    assert psi({"a": 1}, {"a": 1}) == 0
    # a bucket empty on one side is floored at 1e-4, not infinite
    assert psi({"a": 1}, {"b": 1}) == pytest.approx(2 * (1 - 1e-4) * math.log(1 / 1e-4))


def test_features_of_a_profile():
    assert prompt_bucket(0) == "0"
    assert prompt_bucket(1) == "2^0"
    assert prompt_bucket(1000) == "2^9"
    assert task_prefix("weather-17") == "weather"
    assert task_prefix("trip_paris_3_2") == "trip_paris"
    assert task_prefix("") == "<none>"
    counted = profile(
        [
            TrafficSample(["weather", "weather"], 100, "Weather in Paris?", "weather-1"),
            TrafficSample([], 3, "hello paris", "chat-2"),
        ]
    )
    assert counted.size == 2
    assert counted.counts["tools"] == {"weather": 2, "<none>": 1}
    assert counted.counts["prompt_length"] == {"2^6": 1, "2^1": 1}
    assert counted.counts["words"] == {"weather": 1, "in": 1, "paris": 2, "hello": 1}
    assert counted.counts["task_prefix"] == {"weather": 1, "chat": 1}


def _traffic(cities, task, count):
    return [
        TrafficSample(
            ["weather"],
            40 + index % 10,
            f"what is the weather in {cities[index % len(cities)]}",
            f"{task}-{index}",
        )
        for index in range(count)
    ]


def test_same_traffic_does_not_drift_and_new_cities_and_tasks_do():
    reference = _traffic(["paris", "rome", "oslo"], "weather", 60)
    same = drift(reference, _traffic(["paris", "rome", "oslo"], "weather", 30))
    assert same.js_max < DRIFT_THRESHOLD
    assert not same.fired
    moved = drift(reference, _traffic(["lima", "quito", "bogota"], "forecast", 30))
    assert moved.fired
    assert moved.by_feature["task_prefix"]["js"] == 1
    assert moved.feature_max == "task_prefix"
    assert moved.by_feature["words"]["js"] > DRIFT_THRESHOLD
    assert moved.reference_size == 60
    assert moved.current_size == 30


def test_no_traffic_on_either_side_gives_no_value():
    assert drift([], _traffic(["paris"], "weather", 3)).js_max is None
    assert drift(_traffic(["paris"], "weather", 3), []).js_max is None
