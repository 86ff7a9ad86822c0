"""Per-step rewards (workers.rl.step_rewards) and what they do to training samples and GRPO units."""

import pytest

from tests.workers.atdp.fixtures import (
    ANSWER_IDS,
    SYSTEM_AND_QUESTION_IDS,
    TOOL_CALL_IDS,
    TOOL_RESULT_IDS,
    make_trajectory,
)
from workers.rl.advantages import GRPOConfig, sample_token_advantages
from workers.rl.samples import build_samples, trajectory_samples
from workers.rl.step_rewards import runs_of_equal_rewards, step_rewards

PROMPT, CALL, RESULT, ANSWER = (
    len(SYSTEM_AND_QUESTION_IDS),
    len(TOOL_CALL_IDS),
    len(TOOL_RESULT_IDS),
    len(ANSWER_IDS),
)


def test_by_default_a_step_keeps_its_own_reward_and_the_others_take_the_trajectorys():
    assert step_rewards([0.25, None, 1.0], trajectory=0.6) == (0.25, 0.6, 1.0)
    assert step_rewards([None, None], trajectory=0.6) == (0.6, 0.6)
    assert step_rewards([None, None], trajectory=None) == (None, None)


def test_a_single_reward_trains_every_step_as_before():
    # one reward: the trajectory's reward is that reward, wherever it was set
    for own in ([None, None, 1.0], [None, 1.0, None], [1.0, None, None]):
        assert step_rewards(own, trajectory=1.0) == (1.0, 1.0, 1.0)


def test_backpropagation_follows_areal_discounted_returns():
    # G_i = r_i + γ·G_(i+1), a step without a reward counting 0
    assert step_rewards([None, None, 1.0], trajectory=1.0, discount=0.9) == pytest.approx((0.81, 0.9, 1.0))
    assert step_rewards([0.5, None, 1.0], trajectory=0.75, discount=1.0) == (1.5, 1.0, 1.0)
    # the last step without its own reward takes the trajectory-level rewards (outcome), else 0
    assert step_rewards([0.5, None], trajectory=0.5, outcome=2.0, discount=0.5) == (1.5, 2.0)
    assert step_rewards([0.5, None], trajectory=0.5, outcome=None, discount=0.5) == (0.5, 0.0)
    assert step_rewards([None, None], trajectory=None, outcome=None, discount=0.5) == (None, None)
    assert step_rewards([], trajectory=1.0, discount=0.5) == ()
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="discount"):
            step_rewards([1.0], trajectory=1.0, discount=bad)


def test_runs_of_equal_rewards():
    assert runs_of_equal_rewards([1.0, 1.0, 0.5, 0.5, 1.0]) == [(0, 1), (2, 3), (4, 4)]
    assert runs_of_equal_rewards([None]) == [(0, 0)]
    assert runs_of_equal_rewards([]) == []


def _calls(record) -> list[str]:
    return [step["step_id"] for step in record["steps"] if step["kind"] == "llm_call"]


def test_a_rewarded_step_trains_its_own_completion_with_its_reward():
    record = make_trajectory()
    first, second = _calls(record)
    record["step_rewards"] = {"steps": {first: 0.25}, "outcome": 1.0}
    merged = trajectory_samples(make_trajectory()).samples[0]
    result = trajectory_samples(record)
    one, two = result.samples
    assert (one.step_ids, one.reward) == ((first,), 0.25)
    assert (two.step_ids, two.reward) == ((second,), 1.0)  # no reward of its own: the trajectory's
    # the first piece is the first call alone
    assert one.input_ids == merged.input_ids[: PROMPT + CALL]
    assert one.loss_mask == (0,) * PROMPT + (1,) * CALL
    assert one.logprobs == merged.logprobs[: PROMPT + CALL]
    # the second is the whole sequence with the first call's tokens as context (AReaL's interaction sample)
    assert two.input_ids == merged.input_ids
    assert two.loss_mask == (0,) * (PROMPT + CALL + RESULT) + (1,) * ANSWER
    assert two.logprobs[: PROMPT + CALL] == (0.0,) * (PROMPT + CALL)
    assert two.versions[: PROMPT + CALL] == (-1,) * (PROMPT + CALL)
    assert two.logprobs[-ANSWER:] == merged.logprobs[-ANSWER:]
    assert two.turns == (0,) * len(two.input_ids)
    assert one.unit != two.unit
    assert {one.trajectory_id, two.trajectory_id} == {record["trajectory_id"]}
    assert result.counts.samples == 2


def test_equal_step_rewards_leave_the_merged_sample_as_it_was():
    record = make_trajectory()
    (before,) = trajectory_samples(record).samples
    record["step_rewards"] = {"steps": {_calls(record)[1]: 1.0}, "outcome": 1.0}
    assert trajectory_samples(record).samples == (before,)
    record["step_rewards"] = {"steps": {}, "outcome": 1.0}  # what training_records writes without any
    assert trajectory_samples(record).samples == (before,)
    # every step with the same own reward, other than the trajectory's: one sample with that reward
    first, second = _calls(record)
    record["step_rewards"] = {"steps": {first: 0.5, second: 0.5}, "outcome": 1.0}
    (sample,) = trajectory_samples(record).samples
    assert (sample.reward, sample.unit) == (0.5, record["trajectory_id"])


def test_reward_discount_backpropagates_the_outcome_into_per_step_samples():
    record = make_trajectory()
    first, second = _calls(record)
    one, two = trajectory_samples(record, reward_discount=0.5).samples
    assert [(one.step_ids, one.reward), (two.step_ids, two.reward)] == [((first,), 0.5), ((second,), 1.0)]
    record["step_rewards"] = {"steps": {first: 0.25}, "outcome": 1.0}
    one, two = trajectory_samples(record, reward_discount=0.5).samples
    assert (one.reward, two.reward) == (0.75, 1.0)  # 0.25 + 0.5 × 1.0


def test_pieces_with_their_own_rewards_are_grpo_units_of_their_own():
    record = make_trajectory()
    first, _ = _calls(record)
    record["step_rewards"] = {"steps": {first: 0.25}, "outcome": 1.0}
    other = make_trajectory()  # same group, one reward: one unit
    samples = build_samples([record, other]).samples
    assert [sample.reward for sample in samples] == [0.25, 1.0, 1.0]
    _, advantages = sample_token_advantages(samples, GRPOConfig(std_level="none"))
    # three units of the group (mean 0.75): the rewarded step below it, the other two above
    assert advantages.values == pytest.approx((-0.5, 0.25, 0.25))
    assert advantages.reward_mean == pytest.approx(0.75)


def test_the_training_setting_is_checked():
    from workers.engines import TrainConfig

    assert TrainConfig().reward_discount is None
    assert TrainConfig.from_dict({"reward_discount": 0.9}).reward_discount == 0.9
    for bad in (0, 1.5, -1):
        with pytest.raises(ValueError, match="reward_discount"):
            TrainConfig(reward_discount=bad)
