"""`DEMO_TASK=bfcl make demo` in a short form, with SmolLM2-135M-Instruct: the zero-shot measurement, the
warm-up on demonstrations from the train split's ground truth, live BFCL traffic through the gateway with the
checker's environment rewards, the learner, the gate per category, and the table and summary at the end
(zero-shot, warmed-up base, promoted versions; the learner's staleness figures). Checks the behaviour, not the
15-point goal (bench/bfcl measures that)."""

import json
import os
import subprocess
import sys

import pytest

from tests.demo.test_demo import ROOT, _free_port, _free_port_pair

pytestmark = [pytest.mark.real_model, pytest.mark.worker]

CATEGORIES = ("simple_python", "irrelevance")


def test_the_bfcl_demo_runs_the_loop_and_prints_the_table_per_category(tmp_path, smollm2_dir):
    environment = {
        **os.environ,
        "DEMO_TASK": "bfcl",
        "DEMO_VAR_DIR": str(tmp_path / "demo"),
        "DEMO_EXIT": "1",
        "DEMO_BFCL_CATEGORIES": ",".join(CATEGORIES),
        "DEMO_BFCL_DEMOS": "8",
        "DEMO_SFT_STEPS": "2",
        "DEMO_SFT_BATCH": "4",
        "DEMO_HELDOUT": "2",
        "DEMO_BATCH": "2",
        "DEMO_EVAL_EVERY": "1",
        "DEMO_BUDGET_SECONDS": "300",  # under a load of 16 on 2 cores, 150 s saw 7 trajectories and no step
        "DEMO_SUMMARY": str(tmp_path / "summary.json"),
        "PORT": str(_free_port()),
        "AREAL_INFERENCE_PORT": str(_free_port_pair()),
    }
    for name in (
        "AREAL_VAR_DIR",
        "DJANGO_SETTINGS_MODULE",
        "DATABASE_URL",
        "REDIS_URL",
        "AREAL_USE_TEST_DATABASE",
    ):
        environment.pop(name, None)  # the demo is the embedded default (tests/demo/test_demo.py says why)
    finished = subprocess.run(
        [sys.executable, "-m", "demo"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = finished.stdout
    assert finished.returncode == 0, output[-3000:] + finished.stderr[-3000:]
    assert "zero-shot" in output
    assert "demonstrations from the train split's ground truth" in output
    assert "held-out accuracy per category" in output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["model"] == "bfcl"
    assert summary["task"] == "bfcl"
    assert summary["rows"][0]["role"] == "base"
    table = summary["per_category"]
    assert list(table)[:2] == ["zero-shot", "warmed-up v0"]
    for column in table.values():
        assert set(column) == {*CATEGORIES, "all"}
        assert all(value is None or 0.0 <= value <= 1.0 for value in column.values())
    assert table["warmed-up v0"]["all"] is not None
    assert summary["trajectories"] > 0  # BFCL cases of the train split went through the gateway
    assert summary["steps"] >= 1, output[-3000:]  # the learner trained on the checker's rewards
    staleness = summary["staleness"]
    assert staleness["trained"] >= 1
    assert sum(staleness["lag_histogram"].values()) >= 1
    # the traffic sends the train split only: every answer it kept is a train case
    from workers.envs.bfcl import split_of

    assert all(split_of(answer["case_id"]) == "train" for answer in summary["accepted_traffic"])
