"""bench/training/eta.py at a tiny size on the default model: behaviour only (what each arm trains on, the
staleness bound, the result's fields), never timing."""

import json

from bench.training.eta import main, run_benchmark


def test_both_arms_train_the_same_episodes_within_their_staleness_bound(default_model_dir, tmp_path):
    result = run_benchmark(
        default_model_dir, samples=6, batch=2, group=2, max_tokens=6, heldout=2, work_dir=tmp_path
    )

    arms = result["runs"][0]["arms"]
    assert {name: arm["eta"] for name, arm in arms.items()} == {"sync": 0, "async": 2}
    # Each arm as deployed on two cores: sync phases get both; async decodes on one core and trains on the other.
    assert {name: arm["threads"] for name, arm in arms.items()} == {
        "sync": {"rollout": 2, "train": 2},
        "async": {"rollout": 1, "train": 1},
    }
    assert arms["sync"]["trained_samples"] == arms["async"]["trained_samples"] == 6
    assert arms["sync"]["steps"] == arms["async"]["steps"] == 3
    # η = 0: every generated token was sampled by the very version that trains on it.
    assert set(arms["sync"]["staleness_histogram"]) == {"0"}
    assert arms["sync"]["dropped_stale"] == 0
    assert arms["sync"]["episodes_started"] == 6
    # η = 2: all six episodes start on the base at once ((η + 1) · batch), so steps 1-3 train at lags 0, 1, 2.
    assert set(arms["async"]["staleness_histogram"]) == {"0", "1", "2"}
    assert set(result["heldout_success"]) == {"base", "sync", "async"}
    assert result["ratio_sync_over_async"]["per_round"] == [result["runs"][0]["ratio_sync_over_async"]]


def test_the_command_writes_the_result_file(default_model_dir, tmp_path, capsys):
    out = tmp_path / "eta.json"

    main(
        [
            "--base",
            str(default_model_dir),
            "--samples",
            "2",
            "--batch",
            "2",
            "--group",
            "2",
            "--max-tokens",
            "4",
            "--heldout",
            "2",
            "--rounds",
            "2",
            "--out",
            str(out),
        ]
    )

    result = json.loads(out.read_text())
    assert [run["order"] for run in result["runs"]] == [["sync", "async"], ["async", "sync"]]
    for arm in ("sync", "async"):
        fields = result["runs"][1]["arms"][arm]
        assert {"wall_seconds", "trained_samples", "dropped_stale", "tokens_per_second"} <= set(fields)
        assert fields["trained_samples"] == 2
        assert fields["engine"]["prefill_tokens"] > 0
        assert fields["engine"]["prefix_hit_tokens"] >= 0
    assert "sync/async wall clock" in capsys.readouterr().out
