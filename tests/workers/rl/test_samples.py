"""Samples from ATDP: the training view's prefix merge, turns, retry orphans, staleness bound."""

import copy

import pytest

from tests.workers.atdp.fixtures import (
    ANSWER_IDS,
    SYSTEM_AND_QUESTION_IDS,
    TOOL_CALL_IDS,
    TOOL_RESULT_IDS,
    make_step,
    make_tokens,
    make_trajectory,
)
from workers.atdp import training_samples
from workers.rl.samples import build_samples, dropped_calls, trajectory_samples

PROMPT, CALL, RESULT, ANSWER = (
    len(SYSTEM_AND_QUESTION_IDS),
    len(TOOL_CALL_IDS),
    len(TOOL_RESULT_IDS),
    len(ANSWER_IDS),
)


def test_merged_sample_carries_mask_logprobs_versions_and_turns():
    record = make_trajectory()
    result = trajectory_samples(record)
    (sample,) = result.samples
    (view,) = training_samples(record)
    assert list(sample.input_ids) == view["input_ids"]
    assert sample.loss_mask == (0,) * PROMPT + (1,) * CALL + (0,) * RESULT + (1,) * ANSWER
    assert list(sample.logprobs) == view["logprobs"]
    assert list(sample.versions) == view["versions"]
    # turn 0: the first prompt and the tool call; turn 1: the tool result (context) and the answer
    assert sample.turns == (0,) * (PROMPT + CALL) + (1,) * (RESULT + ANSWER)
    assert sample.num_turns == 2
    assert sample.generated_count == CALL + ANSWER
    assert sample.reward == 1.0
    assert sample.group_id == "grpo-group-0042"
    assert sample.task_id == "weather-paris"
    assert result.counts.samples == 1
    assert result.counts.retry_orphans == 0


def test_retry_orphan_is_dropped_and_the_retry_merges():
    record = make_trajectory()
    answer = record["steps"][3]
    # an attempt of the same turn that the client retried: same prompt, another completion
    orphan = make_step(
        3,
        tokens=make_tokens(answer["tokens"]["prompt_ids"], [11, 12, 13]),
        parent_step_id=answer["parent_step_id"],
    )
    answer["result"] = {**answer["result"], "retry_of": orphan["step_id"]}
    record["steps"].insert(3, orphan)
    # the bare training view would glue the orphan onto turn 0 and start a second sample for the retry
    assert len(training_samples(record)) == 2
    assert dropped_calls(record) == ({orphan["step_id"]}, set())
    result = trajectory_samples(record)
    (sample,) = result.samples
    assert sample.input_ids == trajectory_samples(make_trajectory()).samples[0].input_ids
    assert orphan["step_id"] not in sample.step_ids
    assert result.counts.retry_orphans == 1


def test_gateway_style_top_level_retry_of_and_aborted_calls():
    record = make_trajectory()
    last_prompt = record["steps"][3]["tokens"]["prompt_ids"] + ANSWER_IDS + [198]
    aborted = make_step(5, tokens=make_tokens(last_prompt, [42, 43]), result={"aborted": True})
    record["steps"].append(aborted)
    result = trajectory_samples(record)
    assert result.counts.aborted_calls == 1
    assert len(result.samples[0].input_ids) == PROMPT + CALL + RESULT + ANSWER
    record = make_trajectory()
    orphan = copy.deepcopy(record["steps"][3])
    orphan["step_id"] = "orphan"
    record["steps"][3]["retry_of"] = "orphan"
    record["steps"].insert(3, orphan)
    assert trajectory_samples(record).counts.retry_orphans == 1


def test_staleness_bound_drops_samples_or_masks_tokens():
    # versions: the tool call 19 tokens at 7; the answer 6 at 7 then 7 at 8 (an interrupted generation)
    record = make_trajectory()
    dropped = trajectory_samples(record, current_version=9, eta=1)
    assert dropped.samples == ()
    assert dropped.counts.stale_samples == 1
    assert dropped.counts.stale_tokens == CALL + 6
    masked = trajectory_samples(record, current_version=9, eta=1, staleness="token")
    (sample,) = masked.samples
    assert sample.loss_mask == (0,) * PROMPT + (0,) * CALL + (0,) * RESULT + (0,) * 6 + (1,) * 7
    assert masked.counts.stale_tokens == CALL + 6
    assert masked.counts.stale_samples == 0
    assert masked.staleness_histogram == ((1, 7),)
    fresh = trajectory_samples(record, current_version=9, eta=2)
    assert fresh.counts.stale_tokens == 0
    assert fresh.staleness_histogram == ((1, 7), (2, CALL + 6))
    # everything stale in token mode: the sample has nothing left to train and is dropped as stale
    assert trajectory_samples(record, current_version=20, eta=0, staleness="token").counts.stale_samples == 1
    with pytest.raises(ValueError, match="a staleness bound needs current_version and eta >= 0"):
        trajectory_samples(record, eta=1)


def test_rewardless_blocked_and_split_trajectories():
    no_reward = make_trajectory(rewards=[])
    blocked = make_trajectory(purpose="eval")
    split = make_trajectory()
    split["steps"][3]["tokens"]["prompt_ids"][2] = 9999  # re-rendered history: not a prefix any more
    result = build_samples([no_reward, blocked, split], check_blockers=True)
    assert result.counts.no_reward == 1
    assert result.counts.blocked_trajectories == 1
    assert result.counts.trajectories == 3
    assert result.counts.samples == 2
    first, second = result.samples
    assert first.turns == (0,) * (PROMPT + CALL)
    assert set(second.turns) == {0}
    assert second.trajectory_id == first.trajectory_id
    assert build_samples([no_reward], require_reward=False).samples[0].reward is None
