import pytest

from workers.evolution.signals import SIGNALS, fires, mean, per_hundred, rate, share_at_least, trend

EXPECTED = {
    "correction_rate",
    "thumbs_down_rate",
    "reward_mean",
    "reward_trend",
    "evaluator_score",
    "task_success",
    "tool_failure_rate",
    "cost_per_success",
    "latency_p95_ms",
    "safety_events",
    "drift_js",
    "qualified_volume",
    "staleness_versions",
    "production_version",
}


def test_the_catalogue_documents_every_signal():
    assert set(SIGNALS) == EXPECTED
    for name, doc in SIGNALS.items():
        assert doc.name == name
        assert doc.formula
        assert doc.unit
        assert doc.window
        assert doc.op in (">", "<", None)
        assert (doc.op is None) == (doc.threshold is None)


def test_rate_mean_share_and_per_hundred():
    assert rate(1, 4) == 0.25
    assert rate(3, 0) is None
    assert mean([1.0, 2.0, 4.5]) == pytest.approx(2.5)
    assert mean([]) is None
    assert share_at_least([0.5, 0.49, 1.0, 0.0]) == 0.5
    assert share_at_least([]) is None
    assert per_hundred(3, 40) == pytest.approx(7.5)
    assert per_hundred(3, 0) is None


def test_trend_is_the_least_squares_slope_per_hour():
    # values rise 0.1 every 10 minutes: 0.6 per hour, exactly on a line
    points = [(0.0, 0.2), (600.0, 0.3), (1200.0, 0.4), (1800.0, 0.5)]
    assert trend(points) == pytest.approx(0.6)
    # hand-computed: t̄ = 1800, v̄ = 2/3; Σ(t−t̄)(v−v̄) = −1800·(−2/3) + 0 + 1800·(1/3) = 1800;
    # Σ(t−t̄)² = 2·1800² → slope 1/3600 per second = 1 per hour
    assert trend([(0.0, 0.0), (1800.0, 1.0), (3600.0, 1.0)]) == pytest.approx(1.0)


def test_trend_needs_three_points_at_two_times():
    assert trend([(0.0, 1.0), (60.0, 2.0)]) is None
    assert trend([(5.0, 1.0), (5.0, 2.0), (5.0, 3.0)]) is None
    assert trend([(0.0, 1.0), (60.0, 1.0), (120.0, 1.0)]) == 0


def test_fires_uses_the_policy_rule_or_the_default():
    assert fires("tool_failure_rate", 0.2)
    assert not fires("tool_failure_rate", 0.05)
    assert fires("tool_failure_rate", 0.05, {"op": ">", "threshold": 0.01})
    assert fires("reward_mean", 0.1)
    assert not fires("reward_mean", None)
    assert not fires("production_version", 7)
