"""BFCL without a server (workers/envs/bfcl/local.py): the warm-up's demonstrations come from the train split's
ground truth only and score right by BFCL's checker; the per-category tally of verdicts."""

from workers.envs.bfcl import SINGLE_TURN_CATEGORIES, load_cases, score_single_turn, split_of
from workers.envs.bfcl.local import (
    DECLINE,
    demonstration,
    demonstrations,
    ground_truth_calls,
    heldout_cases,
    tally,
)
from workers.envs.bfcl.scoring import Score


def test_demonstrations_are_train_cases_of_every_category_and_score_right():
    chosen = demonstrations(SINGLE_TURN_CATEGORIES, count=25, seed=3)
    assert len(chosen.cases) == 25
    assert {case.category for case in chosen.cases} == set(SINGLE_TURN_CATEGORIES)  # round-robin
    assert all(split_of(case.case_id) == "train" for case in chosen.cases)
    for case in chosen.cases:
        assert score_single_turn(case, ground_truth_calls(case)).valid, case.case_id
    assert demonstrations(SINGLE_TURN_CATEGORIES, count=25, seed=3) == chosen  # seeded
    assert demonstrations(SINGLE_TURN_CATEGORIES, count=25, seed=4).cases != chosen.cases


def test_all_demonstrations_hold_no_held_out_case():
    held_out = {case.case_id for case in heldout_cases(SINGLE_TURN_CATEGORIES)}
    chosen = demonstrations(SINGLE_TURN_CATEGORIES)
    assert held_out
    assert not held_out & {case.case_id for case in chosen.cases}
    train = sum(len(load_cases(category, split="train")) for category in SINGLE_TURN_CATEGORIES)
    assert len(chosen.cases) + len(chosen.left_out) == train


def test_a_demonstration_is_the_first_turn_and_the_ground_truth_answer():
    (case,) = list(load_cases("parallel", split="train")[:1])
    messages = demonstration(case)
    assert messages[:-1] == list(case.turns[0])
    answer = messages[-1]
    assert answer["role"] == "assistant"
    assert [call["function"]["name"] for call in answer["tool_calls"]] == [
        call.name for call in ground_truth_calls(case)
    ]
    irrelevant = load_cases("irrelevance", split="train")[0]
    assert demonstration(irrelevant)[-1] == {"role": "assistant", "content": DECLINE}


def test_the_tally_counts_per_category():
    cases = load_cases("simple_python", split="heldout")[:3] + load_cases("irrelevance", split="heldout")[:1]
    verdicts = [Score(True, "ok"), Score(False, "wrong", "value_error"), Score(True, "ok")]
    measured = tally(cases, [*verdicts, Score(False, "called", "irrelevance")])
    assert measured.per_category == {
        "simple_python": {"accuracy": 2 / 3, "cases": 3, "right": 2},
        "irrelevance": {"accuracy": 0.0, "cases": 1, "right": 0},
    }
    assert measured.accuracy == 0.5
    assert measured.reasons == {"right": 2, "value_error": 1, "irrelevance": 1}
