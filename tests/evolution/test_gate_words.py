"""A gate's outcome in a sentence (apps/evolution/gate_words.py): what the decision timeline, its live payload
and an evaluation's outcome say instead of the evidence's numbers."""

import pytest

from apps.evolution.gate_words import (
    evidence_gate_words,
    gate_outcome,
    gate_score_words,
    gate_words,
    percent,
    version_gate_scores,
)


def test_the_issues_example_reads_as_written():
    assert (
        gate_outcome(version="v2", score=1 / 3, best_production=0.2)
        == "v2: 33 % held-out, best production 20 %; gate passed"
    )


@pytest.mark.parametrize(
    ("arguments", "sentence"),
    [
        ({"score": 0.15, "best_production": 0.2}, "v2: 15 % held-out, best production 20 %; gate failed"),
        (  # a minimum gain is said after the score to beat, and decides
            {"score": 0.22, "best_production": 0.2, "min_gain": 0.05},
            "v2: 22 % held-out, best production 20 % + 5 points; gate failed",
        ),
        (
            {"score": 0.4, "best_production": None},
            "v2: 40 % held-out, no production score to beat; gate passed",
        ),
        ({"score": None, "best_production": 0.2}, "v2: not measured by the gate yet"),
        (  # what the gate recorded wins over the rule
            {"score": 0.3, "best_production": 0.2, "passed": False},
            "v2: 30 % held-out, best production 20 %; gate failed",
        ),
        (
            {"score": 0.5, "best_production": 0.5, "measure": "on the suite smoke"},
            "v2: 50 % on the suite smoke, best production 50 %; gate passed",
        ),
    ],
)
def test_an_outcome_says_score_what_it_beats_and_the_verdict(arguments, sentence):
    assert gate_outcome(version="v2", **arguments) == sentence


def test_percent_rounds_to_whole_points_with_a_space():
    assert (percent(0.333), percent(1.0), percent(0.0)) == ("33 %", "100 %", "0 %")


def test_what_a_score_measures():
    assert gate_score_words({"environment": "weather", "cases": 20}) == "held-out"
    assert gate_score_words({"suite_id": 4}, suite_names={4: "smoke"}) == "on the suite smoke"
    assert gate_score_words({"suite_id": 4}) == "on its evaluation suite"  # no name at hand: no id either


def test_a_decisions_evidence_says_its_outcome_once_measured_else_its_gate():
    measured = {
        "gate": {"environment": "weather", "cases": 20, "seed": 7},
        "gate_score": 1 / 3,
        "best_production_score": 0.2,
        "production_score": 0.2,
        "min_gain": 0.0,
        "passed": True,
        "candidate": 2,
    }
    assert evidence_gate_words(measured) == "v2: 33 % held-out, best production 20 %; gate passed"
    assert evidence_gate_words({**measured, "candidate": None}, version=5).startswith("v5: 33 % held-out")
    del measured["candidate"]
    assert evidence_gate_words(measured).startswith("the candidate: 33 % held-out")
    running = {"gate": {"environment": "weather", "cases": 20, "seed": 7, "min_gain": 0.05}}
    assert evidence_gate_words(running) == (
        "20 held-out cases of weather (seed 7); the candidate must beat the best production version by at least "
        "0.05."
    )
    assert evidence_gate_words({"signals": []}) == ""
    assert evidence_gate_words(None) == ""
    assert evidence_gate_words({"gate_score": "high"}) == ""  # not a number: no sentence made up


def test_a_gate_in_words():
    assert (
        gate_words({}, suite_names={}) == "No gate: a new version goes to a release without an offline check."
    )
    assert gate_words({"suite_id": 3, "safety_suite_id": 4}, suite_names={3: "smoke", 4: "safety"}) == (
        "The evaluation suite smoke; the candidate must do at least as well as the best production version, and "
        "no worse on the safety suite safety."
    )


def test_a_versions_gate_scores_in_words():
    metrics = {
        "gate": {
            "weather:20:7": {"score": 1 / 3, "cases": 20, "reasons": {}},
            "bfcl:None:0": {"score": 0.5, "cases": 40},
            "suite:3": {"score": 0.9},  # listed with its eval runs
            "weather:64:0": {"cases": 64},  # no score: nothing said
        },
        "heldout": {"success": 1 / 3, "cases": 20},
    }
    assert version_gate_scores(metrics) == [
        "bfcl held-out: 50 % of 40 cases",
        "weather held-out: 33 % of 20 cases (seed 7)",
    ]
    assert version_gate_scores({}) == []
    assert version_gate_scores(None) == []
    assert version_gate_scores({"gate": "corrupt"}) == []
