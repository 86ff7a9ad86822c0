"""The training view: prefix-merge of llm_call steps, rewards, and the PII exclusion rule."""

from tests.workers.atdp.fixtures import (
    ANSWER_IDS,
    SYSTEM_AND_QUESTION_IDS,
    TOOL_CALL_IDS,
    TOOL_RESULT_IDS,
    make_reward,
    make_step,
    make_tokens,
    make_trajectory,
)
from workers.atdp import (
    training_blockers,
    training_reward,
    training_samples,
    training_view_exclusions,
    validate_trajectory,
)
from workers.atdp.training_view import EXCLUDED_NO_TOKENS, EXCLUDED_PII_REDACTED


def test_extending_prompt_merges_into_one_sample():
    record = make_trajectory()
    first, second = record["steps"][0], record["steps"][3]
    (sample,) = training_samples(record)

    prompt, context = len(SYSTEM_AND_QUESTION_IDS), len(TOOL_RESULT_IDS)
    assert sample["input_ids"] == SYSTEM_AND_QUESTION_IDS + TOOL_CALL_IDS + TOOL_RESULT_IDS + ANSWER_IDS
    assert sample["input_ids"] == second["tokens"]["prompt_ids"] + second["tokens"]["completion_ids"]
    assert sample["loss_mask"] == [0] * prompt + [1] * len(TOOL_CALL_IDS) + [0] * context + [1] * len(
        ANSWER_IDS
    )
    assert sample["logprobs"] == (
        [0.0] * prompt
        + first["tokens"]["completion_logprobs"]
        + [0.0] * context
        + second["tokens"]["completion_logprobs"]
    )
    assert sample["versions"] == [-1] * prompt + [7] * len(TOOL_CALL_IDS) + [-1] * context + [7] * 6 + [8] * 7
    assert sample["step_ids"] == [first["step_id"], second["step_id"]]
    assert sample["reward"] == 1.0
    assert sample["group_id"] == "grpo-group-0042"
    assert sample["trajectory_id"] == record["trajectory_id"]
    assert set(sample) == {
        "input_ids",
        "loss_mask",
        "logprobs",
        "versions",
        "reward",
        "group_id",
        "trajectory_id",
        "step_ids",
    }
    lengths = {len(sample[name]) for name in ("input_ids", "loss_mask", "logprobs", "versions")}
    assert lengths == {len(sample["input_ids"])}


def test_samples_do_not_alias_the_record():
    record = make_trajectory()
    (sample,) = training_samples(record)
    sample["input_ids"].append(1)
    sample["logprobs"].clear()
    assert validate_trajectory(record) == []
    assert training_samples(record)[0]["input_ids"][-1] == ANSWER_IDS[-1]


def test_diverging_prompt_starts_a_new_sample():
    record = make_trajectory()
    # a re-rendered history (say, the harness truncated the system prompt): not a prefix any more
    record["steps"][3]["tokens"]["prompt_ids"][2] = 9999
    first, second = training_samples(record)
    assert first["input_ids"] == SYSTEM_AND_QUESTION_IDS + TOOL_CALL_IDS
    assert first["loss_mask"] == [0] * len(SYSTEM_AND_QUESTION_IDS) + [1] * len(TOOL_CALL_IDS)
    assert second["input_ids"] == record["steps"][3]["tokens"]["prompt_ids"] + ANSWER_IDS
    assert second["loss_mask"].count(1) == len(ANSWER_IDS)
    assert [sample["step_ids"] for sample in (first, second)] == [
        [record["steps"][0]["step_id"]],
        [record["steps"][3]["step_id"]],
    ]


def test_prompt_that_drops_the_last_generated_token_is_not_a_prefix_match():
    record = make_trajectory()
    # the next prompt has everything but the final <|im_end|> of the first completion
    record["steps"][3]["tokens"]["prompt_ids"] = SYSTEM_AND_QUESTION_IDS + TOOL_CALL_IDS[:-1]
    assert len(training_samples(record)) == 2


def test_different_tokenizer_never_merges():
    record = make_trajectory()
    record["steps"][3]["tokens"]["tokenizer"] = "another-tokenizer"
    assert len(training_samples(record)) == 2


def test_three_calls_chain_into_one_sample():
    record = make_trajectory()
    third_prompt = record["steps"][3]["tokens"]["prompt_ids"] + ANSWER_IDS + [198, 151644, 872]
    third = make_step(
        5,
        tokens=make_tokens(third_prompt, [42, 43], policy_version=9),
        parent_step_id=record["steps"][4]["step_id"],
    )
    record["steps"].append(third)
    assert validate_trajectory(record) == []
    (sample,) = training_samples(record)
    assert sample["input_ids"] == third_prompt + [42, 43]
    assert sample["loss_mask"][-5:] == [0, 0, 0, 1, 1]
    assert sample["versions"][-5:] == [-1, -1, -1, 9, 9]
    assert len(sample["step_ids"]) == 3


def test_a_step_loss_mask_is_used_for_the_tokens_it_contributes():
    record = make_trajectory()
    tokens = record["steps"][3]["tokens"]
    # the agent masks out the first two answer tokens
    tokens["loss_mask"] = [0] * len(tokens["prompt_ids"]) + [0, 0] + [1] * (len(ANSWER_IDS) - 2)
    assert validate_trajectory(record) == []
    (sample,) = training_samples(record)
    assert sample["loss_mask"][-len(ANSWER_IDS) :] == [0, 0] + [1] * (len(ANSWER_IDS) - 2)
    assert sample["loss_mask"][: len(SYSTEM_AND_QUESTION_IDS) + len(TOOL_CALL_IDS)] == (
        [0] * len(SYSTEM_AND_QUESTION_IDS) + [1] * len(TOOL_CALL_IDS)
    )


def test_reward_is_the_last_trajectory_reward():
    record = make_trajectory()
    record["rewards"].append(make_reward(target="trajectory", value=-0.5, created_by="annotator"))
    assert training_reward(record) == -0.5
    assert training_samples(record)[0]["reward"] == -0.5


def test_reward_falls_back_to_the_sum_of_step_rewards_then_none():
    record = make_trajectory()
    steps = record["steps"]
    record["rewards"] = [
        make_reward(target="step", step_id=steps[0]["step_id"], value=0.25),
        make_reward(target="step", step_id=steps[3]["step_id"], value=0.5),
    ]
    assert training_reward(record) == 0.75
    record["rewards"] = []
    assert training_reward(record) is None
    assert training_samples(record)[0]["reward"] is None


def test_redacted_step_is_excluded_and_breaks_the_merge():
    record = make_trajectory()
    record["steps"][0]["pii"] = {"redacted": True, "entities": ["PERSON"]}
    samples = training_samples(record)
    assert [sample["step_ids"] for sample in samples] == [[record["steps"][3]["step_id"]]]
    # none of the redacted step's generated ids is trained on
    assert samples[0]["loss_mask"].count(1) == len(ANSWER_IDS)
    assert training_view_exclusions(record) == [(record["steps"][0]["step_id"], EXCLUDED_PII_REDACTED)]


def test_retokenized_redacted_step_is_kept():
    record = make_trajectory()
    record["steps"][0]["pii"] = {"redacted": True, "entities": ["PERSON"]}
    record["steps"][0]["tokens"]["retokenized"] = True
    assert training_view_exclusions(record) == []
    (sample,) = training_samples(record)
    assert sample["step_ids"][0] == record["steps"][0]["step_id"]


def test_redacted_non_llm_steps_are_not_exclusions():
    record = make_trajectory()
    record["steps"][2]["pii"] = {"redacted": True, "entities": ["ADDRESS"]}
    assert training_view_exclusions(record) == []
    assert len(training_samples(record)) == 1


def test_llm_call_without_tokens_is_excluded():
    record = make_trajectory()
    record["steps"][3]["tokens"] = None
    assert training_view_exclusions(record) == [(record["steps"][3]["step_id"], EXCLUDED_NO_TOKENS)]
    (sample,) = training_samples(record)
    assert sample["step_ids"] == [record["steps"][0]["step_id"]]


def test_training_blockers():
    assert training_blockers(make_trajectory()) == []
    record = make_trajectory(purpose="eval")
    record["governance"]["training_use"] = False
    record["governance"]["consent"] = "metadata_only"
    record["governance"]["qualification"]["status"] = "pending"
    assert training_blockers(record) == [
        "purpose is eval",
        "training_use is false",
        "consent is metadata_only",
        "qualification is pending",
    ]
