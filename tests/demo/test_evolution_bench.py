"""bench/evolution's reading of a demo summary: reaction time against the trigger, the decisions that must
follow, false alarms, success before and after, and a loud refusal when the control plane did not run."""

import json

import pytest

from bench.evolution.run import NoControlPlane, analyse, main
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from workers.envs.scenarios import SCENARIOS, World


class Clock:
    now = 5_000.0

    def __call__(self) -> float:
        return self.now


def _summary(
    name: str, decisions: list[tuple[str, float]], *, buckets=(), run_seconds: float = 400, notes=()
) -> dict:
    """A summary as demo/scenario.py writes it: the world run for `run_seconds`, the host's notes and
    the decisions at their seconds."""
    clock = Clock()
    world = World(SCENARIOS[name], clock=clock).start()
    started = clock.now
    for what, seconds in notes:
        clock.now = started + seconds
        world.summary()  # the switches due by then take effect first, as the traffic would see them
        world.note(what)
    clock.now = started + run_seconds
    scenario = world.summary()
    scenario.update({"host": [], "policy": {"id": 1, "mode": "auto", "revision": 1}, "signal_points": 40})
    return {
        "scenario": scenario,
        "decisions": [
            {"kind": kind, "status": "succeeded", "decided_by": "policy", "seconds": seconds}
            for kind, seconds in decisions
        ],
        "live_success": [
            {"seconds": seconds, "episodes": 10, "success": success} for seconds, success in buckets
        ],
    }


def test_a_harness_update_within_the_limit_is_a_reaction_and_counts_from_the_fault():
    summary = _summary(
        "tool_failure",
        [("evaluate", 20), ("update_harness", 95), ("release", 110)],
        buckets=[(0, 0.6), (30, 0.6), (60, 0.4), (90, 0.5), (240, 0.6), (270, 0.6)],
    )
    result = analyse(summary)
    assert result["trigger_seconds"] == 60
    assert result["reaction_seconds"] == 35
    assert result["reacted"] is True
    assert result["false_alarms"] == 0
    assert result["success_before"] == pytest.approx(0.6)
    assert result["success_after"] == pytest.approx(0.6)
    assert result["passed"] is True


def test_too_late_a_reaction_a_missing_follow_up_and_an_alarm_before_the_trigger_fail():
    late = analyse(_summary("tool_failure", [("rollback", 60 + 121)]))
    assert late["reaction_seconds"] == 121
    assert late["reacted"] is False
    assert late["passed"] is False
    # The bad release waits for a good production: the reaction counts from when the host sent it.
    sent = [("bad_release_sent", 150)]
    no_restart = analyse(_summary("bad_release", [("rollback", 170)], notes=sent))
    assert no_restart["trigger_seconds"] == 150
    assert no_restart["reaction_seconds"] == 20
    assert no_restart["reacted"] is True
    assert no_restart["then"] == {"restart_learner": None}
    assert no_restart["passed"] is False
    restarted = analyse(_summary("bad_release", [("rollback", 170), ("restart_learner", 175)], notes=sent))
    assert restarted["then"] == {"restart_learner": 25}
    assert restarted["passed"] is True
    alarmed = analyse(
        _summary(
            "bad_release", [("restart_learner", 45), ("rollback", 170), ("restart_learner", 175)], notes=sent
        )
    )
    assert alarmed["false_alarms"] == 1
    assert alarmed["passed"] is False
    never_sent = analyse(_summary("bad_release", [("rollback", 170)]))
    assert never_sent["trigger_seconds"] is None
    assert never_sent["passed"] is False


def test_stationary_counts_every_alarm_after_the_settling_time_and_drift_must_recover():
    quiet = analyse(_summary("stationary", [("train", 5), ("evaluate", 100)], run_seconds=600))
    assert quiet["false_alarms"] == 0
    assert quiet["passed"] is True
    noisy = analyse(_summary("stationary", [("train", 5), ("update_harness", 300), ("rollback", 500)]))
    assert noisy["false_alarms"] == 2
    assert noisy["passed"] is False
    dropped = _summary(
        "drift",
        [("train", 100)],
        buckets=[(0, 0.5), (30, 0.6), (60, 0.2), (420, 0.3), (450, 0.35)],
        run_seconds=480,
    )
    result = analyse(dropped)
    assert result["reacted"] is True
    assert result["recovered"] is False
    assert result["passed"] is False
    dropped["live_success"][-2:] = [{"seconds": 420, "episodes": 10, "success": 0.55}] * 2
    assert analyse(dropped)["recovered"] is True


def test_a_run_where_the_control_plane_did_not_run_gives_no_figures_and_a_loud_exit(tmp_path, capsys):
    summary = _summary("tool_failure", [])
    with pytest.raises(NoControlPlane, match="took no decision"):
        analyse(summary)
    with pytest.raises(NoControlPlane, match="never ticked"):
        analyse({**summary, "scenario": {**summary["scenario"], "signal_points": 0}})
    with pytest.raises(NoControlPlane, match="no evolution policy"):
        analyse({**summary, "scenario": {**summary["scenario"], "policy": None}})
    with pytest.raises(NoControlPlane, match="no decisions"):
        analyse({"scenario": summary["scenario"], "rows": []})
    failed = {**summary["scenario"], "host": [{"what": "bad_release_failed", "error": "no production"}]}
    with pytest.raises(NoControlPlane, match="could not carry out its switch: no production"):
        analyse({**_summary("tool_failure", [("update_harness", 70)]), "scenario": failed})
    with pytest.raises(NoControlPlane, match="no scenario section"):
        analyse({"rows": []})
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    assert main(["--summary", str(path)]) == 2
    assert "NO FIGURES" in capsys.readouterr().out
    path.write_text(json.dumps(_summary("tool_failure", [("update_harness", 70)])))
    assert main(["--summary", str(path)]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_calibration_measures_each_scenarios_world_and_degraded_copies_on_a_real_checkpoint(
    default_model_dir, tmp_path
):
    from bench.evolution.calibrate import calibrate, scenario_world_on

    world = scenario_world_on("tool_failure")
    assert [event["what"] for event in world.events] == []  # lazily: the switches come due when consulted
    assert [tool["function"]["name"] for tool in world.tools()] == ["get_weather_v2", "get_weather"]
    result = calibrate(default_model_dir, cases=2, noises=[0.5], seed=0, work_dir=tmp_path)
    assert list(result["rows"]) == [
        "default world",
        "tool_failure (all switches on)",
        "drift (all switches on)",
        "drift_cities (all switches on)",
        "tool_failure routed to v2 (simulated)",
        "degraded, noise 0.5",
    ]
    for row in result["rows"].values():
        assert 0.0 <= row["success"] <= 1.0
        assert sum(row["reasons"].values()) == 2
    assert (tmp_path / "noise-0.5" / "degraded.json").exists()
