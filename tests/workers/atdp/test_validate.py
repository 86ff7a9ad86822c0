"""Cross-field rules that JSON Schema cannot state, checked by validate.py."""

import copy

from tests.workers.atdp.fixtures import make_reward, make_trajectory, new_id
from workers.atdp import Problem, validate_trajectory
from workers.atdp.validate import format_path


def problems_of(record) -> list[tuple[str, str]]:
    return [(problem.path, problem.message) for problem in validate_trajectory(record)]


def test_format_path():
    assert format_path(["steps", 2, "tokens", "completion_logprobs"]) == "steps[2].tokens.completion_logprobs"
    assert format_path([]) == ""
    assert format_path([0, "a"]) == "[0].a"
    assert str(Problem("status", "bad")) == "status: bad"
    assert str(Problem("", "invalid JSON")) == "invalid JSON"


def test_logprobs_must_match_completion_length():
    record = make_trajectory()
    record["steps"][3]["tokens"]["completion_logprobs"].pop()
    assert problems_of(record) == [
        ("steps[3].tokens.completion_logprobs", "has 12 items; completion_ids has 13")
    ]


def test_versions_must_match_completion_length():
    record = make_trajectory()
    record["steps"][0]["tokens"]["completion_versions"].append(7)
    assert problems_of(record) == [
        ("steps[0].tokens.completion_versions", "has 20 items; completion_ids has 19")
    ]


def test_loss_mask_covers_prompt_then_completion():
    record = make_trajectory()
    tokens = record["steps"][0]["tokens"]
    tokens["loss_mask"] = [0] * len(tokens["prompt_ids"]) + [1] * len(tokens["completion_ids"])
    assert validate_trajectory(record) == []
    tokens["loss_mask"] = [1] * len(tokens["completion_ids"])
    ((path, message),) = problems_of(record)
    assert path == "steps[0].tokens.loss_mask"
    assert message.startswith("has 19 items")


def test_step_reward_requires_step_id():
    record = make_trajectory()
    record["rewards"][0]["step_id"] = None
    assert problems_of(record) == [("rewards[0].step_id", "is required when target is step")]


def test_step_reward_must_name_a_step_of_this_trajectory():
    record = make_trajectory()
    record["rewards"][0]["step_id"] = new_id()
    assert problems_of(record) == [("rewards[0].step_id", "names no step of this trajectory")]


def test_trajectory_reward_forbids_step_id():
    record = make_trajectory()
    record["rewards"][1]["step_id"] = record["steps"][0]["step_id"]
    assert problems_of(record) == [("rewards[1].step_id", "must be null when target is trajectory")]


def test_boolean_reward_is_zero_or_one():
    record = make_trajectory()
    record["rewards"][1]["value"] = 0.5
    assert problems_of(record) == [("rewards[1].value", "must be 0 or 1 for a boolean reward; got 0.5")]
    record["rewards"][1]["value"] = 0
    assert validate_trajectory(record) == []


def test_duplicate_reward_id():
    record = make_trajectory()
    record["rewards"].append(make_reward(reward_id=record["rewards"][0]["reward_id"]))
    assert problems_of(record) == [("rewards[2].reward_id", "repeats rewards[0].reward_id")]


def test_step_indexes_run_from_zero_in_order():
    record = make_trajectory()
    record["steps"][1], record["steps"][2] = record["steps"][2], record["steps"][1]
    record["steps"][1]["parent_step_id"] = record["steps"][0]["step_id"]
    record["steps"][2]["parent_step_id"] = record["steps"][0]["step_id"]
    assert [path for path, _ in problems_of(record)] == ["steps[1].index", "steps[2].index"]

    gap = make_trajectory()
    gap["steps"][4]["index"] = 5
    assert problems_of(gap) == [("steps[4].index", "must be 4: step indexes run 0..n-1 in list order; got 5")]

    starts_at_one = make_trajectory()
    for step in starts_at_one["steps"]:
        step["index"] += 1
    assert len(validate_trajectory(starts_at_one)) == 5


def test_duplicate_step_id():
    record = make_trajectory()
    record["steps"][4]["step_id"] = record["steps"][0]["step_id"]
    assert problems_of(record) == [("steps[4].step_id", "repeats steps[0].step_id")]


def test_parent_must_be_an_earlier_step():
    record = make_trajectory()
    record["steps"][1]["parent_step_id"] = record["steps"][3]["step_id"]
    assert problems_of(record) == [
        ("steps[1].parent_step_id", "must name an earlier step of this trajectory")
    ]
    record["steps"][1]["parent_step_id"] = record["steps"][1]["step_id"]
    assert problems_of(record) == [
        ("steps[1].parent_step_id", "must name an earlier step of this trajectory")
    ]


def test_forks_are_allowed():
    record = make_trajectory()
    # a retry of the first call: a second branch from the same parent
    retry = copy.deepcopy(record["steps"][3])
    retry.update(step_id=new_id(), index=5, parent_step_id=record["steps"][2]["step_id"])
    record["steps"].append(retry)
    assert validate_trajectory(record) == []


def test_tokens_only_on_llm_calls():
    record = make_trajectory()
    record["steps"][1]["tokens"] = copy.deepcopy(record["steps"][0]["tokens"])
    assert problems_of(record) == [
        ("steps[1].tokens", "must be null unless kind is llm_call (kind is tool_call)")
    ]


def test_ended_at_is_null_only_while_open():
    assert validate_trajectory(make_trajectory(status="open", ended_at=None)) == []
    assert problems_of(make_trajectory(status="complete", ended_at=None)) == [
        ("ended_at", "may be null only while status is open (status is complete)")
    ]


def test_cross_field_rules_survive_malformed_records():
    record = make_trajectory()
    record["steps"][0] = "not a step"
    record["steps"][3]["tokens"]["completion_ids"] = "nope"
    record["rewards"] = {"not": "a list"}
    paths = [problem.path for problem in validate_trajectory(record)]
    assert paths == ["steps[0]", "steps[3].tokens.completion_ids", "rewards", "steps[1].parent_step_id"]
