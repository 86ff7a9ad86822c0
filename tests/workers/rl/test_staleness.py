"""The online run's staleness batching (workers.rl.staleness): intake against V − η, when a step is due, and
what a step takes, drops and leaves waiting."""

import dataclasses

import pytest

from tests.workers.atdp.fixtures import make_trajectory
from workers.rl.samples import TrainingSample, build_samples
from workers.rl.staleness import (
    Batch,
    Waiting,
    classify,
    is_fresh,
    is_ready,
    oldest_fresh_version,
    take_batch,
    uniform_groups,
    waiting_sample_count,
)


def sample(trajectory_id: str, *versions: int, mask: tuple[int, ...] | None = None) -> TrainingSample:
    """A sample whose tokens were sampled by `versions` (-1: context, never trained on)."""
    loss_mask = mask if mask is not None else tuple(int(version >= 0) for version in versions)
    return TrainingSample(
        input_ids=tuple(range(len(versions))),
        loss_mask=loss_mask,
        logprobs=(0.0,) * len(versions),
        versions=tuple(versions),
        turns=(0,) * len(versions),
        reward=1.0,
        group_id=None,
        task_id=None,
        trajectory_id=trajectory_id,
        step_ids=("s",),
    )


def waiting(trajectory_id: str, *samples_versions: tuple[int, ...]) -> Waiting:
    return Waiting(
        trajectory_id=trajectory_id,
        samples=tuple(sample(trajectory_id, *versions) for versions in samples_versions),
    )


def ids(items) -> list[str]:
    return [item.trajectory_id for item in items]


def test_the_oldest_fresh_version_is_v_minus_eta():
    assert oldest_fresh_version(current_version=5, eta=2) == 3
    assert oldest_fresh_version(current_version=5, eta=0) == 5


def test_freshness_looks_only_at_generated_tokens():
    assert is_fresh(sample("t", -1, -1, 3, 4), oldest=3)  # the boundary version is still fresh
    assert not is_fresh(sample("t", -1, 2, 4), oldest=3)  # one token a version too old is enough
    assert is_fresh(sample("t", -1, -1), oldest=100)  # context never ages
    # a token masked out of the loss (token-mode staleness) no longer counts, whatever its version
    assert is_fresh(sample("t", 0, 5, mask=(0, 1)), oldest=3)


def test_classify_sorts_arrivals_into_waiting_stale_and_empty_in_queue_order():
    # make_trajectory: one sample, generated tokens by versions 7 and 8
    fresh_a, fresh_b, old, unrewarded = (make_trajectory() for _ in range(4))
    unrewarded["rewards"] = []
    records = {
        "a": fresh_a,
        "b": fresh_b,
        "old": old,
        "unrewarded": unrewarded,
    }
    # at V = 8, η = 1 every record is fresh: 7 >= 8 − 1
    intake = classify(["b", "missing", "a", "unrewarded"], records, current_version=8, eta=1)
    assert ids(intake.waiting) == ["b", "a"]
    assert intake.waiting[0].samples == build_samples([fresh_b], current_version=8, eta=1).samples
    assert intake.stale == ()
    assert intake.empty == ("missing", "unrewarded")
    # at V = 9 the version-7 tokens are past η = 1: the whole sample is stale
    later = classify(["old", "a"], records, current_version=9, eta=1)
    assert (ids(later.waiting), later.stale, later.empty) == ([], ("old", "a"), ())
    # η = 2 keeps them
    assert ids(classify(["old"], records, current_version=9, eta=2).waiting) == ["old"]


def test_a_step_is_due_once_enough_samples_wait():
    queue = [waiting("a", (0,), (0,)), waiting("b", (0,))]
    assert waiting_sample_count(queue) == 3
    assert is_ready(queue, samples_per_step=3)
    assert not is_ready(queue, samples_per_step=4)
    assert not is_ready([], samples_per_step=1)


def test_the_batch_takes_whole_trajectories_oldest_first_until_it_is_full():
    queue = [waiting("a", (4,), (4,)), waiting("b", (4,)), waiting("c", (4,), (4,)), waiting("d", (4,))]
    batch = take_batch(queue, current_version=4, eta=0, samples_per_step=3)
    assert batch.trained == ("a", "b")
    assert [item.trajectory_id for item in batch.samples] == ["a", "a", "b"]
    assert ids(batch.waiting) == ["c", "d"]
    assert batch.stale == ()
    # the last trajectory taken may overshoot: a trajectory's samples never straddle two steps
    over = take_batch(queue, current_version=4, eta=0, samples_per_step=2)
    assert (over.trained, len(over.samples), ids(over.waiting)) == (("a",), 2, ["b", "c", "d"])
    over = take_batch(queue, current_version=4, eta=0, samples_per_step=4)
    assert (over.trained, len(over.samples), ids(over.waiting)) == (("a", "b", "c"), 5, ["d"])


def test_the_bound_is_respected_after_a_publication_aged_the_queue():
    queue = [
        waiting("old", (1,), (2,)),  # both samples older than V − η = 3: dropped
        waiting("mixed", (2,), (3,), (-1, 4)),  # one stale sample, two fresh ones
        waiting("fresh", (5,)),
        waiting("older", (0,)),
        waiting("late", (4,)),
    ]
    batch = take_batch(queue, current_version=5, eta=2, samples_per_step=3)
    assert batch.stale == ("old", "older")  # queue order
    assert batch.trained == ("mixed", "fresh")
    assert all(is_fresh(taken, oldest=3) for taken in batch.samples)
    assert [taken.versions for taken in batch.samples] == [(3,), (-1, 4), (5,)]
    assert ids(batch.waiting) == ["late"]
    # every trajectory ends up in exactly one place
    placed = [*batch.trained, *batch.stale, *ids(batch.waiting)]
    assert sorted(placed) == sorted(ids(queue))


def test_a_queue_with_nothing_fresh_left_gives_an_empty_batch():
    queue = [waiting("a", (1,)), waiting("b", (0,), (1,))]
    batch = take_batch(queue, current_version=3, eta=1, samples_per_step=1)
    assert batch == Batch(samples=(), trained=(), stale=("a", "b"), waiting=())


def test_the_queue_passed_in_is_left_as_it_was():
    queue = [waiting("a", (1,)), waiting("b", (3,)), waiting("c", (3,))]
    batch = take_batch(queue, current_version=3, eta=0, samples_per_step=1)
    assert (batch.stale, batch.trained, ids(batch.waiting)) == (("a",), ("b",), ["c"])
    assert ids(queue) == ["a", "b", "c"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        queue[0].trajectory_id = "x"


def _with_unknown_versions(record: dict) -> dict:
    """The record as a backend that reported no versions leaves it: every generated token -1."""
    for step in record["steps"]:
        if step.get("tokens"):
            step["tokens"]["completion_versions"] = [-1] * len(step["tokens"]["completion_ids"])
    return record


def test_unknown_versions_are_counted_and_kept_or_dropped_as_asked():
    records = {"unknown": _with_unknown_versions(make_trajectory()), "known": make_trajectory()}
    # far past η for any known version: only the unknown tokens escape the bound, and are counted
    kept = classify(["unknown", "known"], records, current_version=100, eta=0)
    assert (ids(kept.waiting), kept.stale, kept.unknown_version_samples) == (["unknown"], ("known",), 1)
    counts = build_samples([records["unknown"]], current_version=100, eta=0).counts
    assert (counts.unknown_version_samples, counts.samples) == (1, 1)
    assert counts.unknown_version_tokens == sum(kept.waiting[0].samples[0].loss_mask)
    dropped = classify(["unknown"], records, current_version=100, eta=0, unknown_versions="drop")
    assert (dropped.waiting, dropped.empty, dropped.unknown_version_samples) == ((), ("unknown",), 1)
    with pytest.raises(ValueError, match="unknown_versions"):
        build_samples([records["unknown"]], unknown_versions="fresh")


def member(trajectory_id: str, group: str, reward: float, version: int = 4) -> Waiting:
    """A waiting trajectory of GRPO group `group` with one sample of `reward`, sampled by `version`."""
    one = dataclasses.replace(sample(trajectory_id, -1, version), group_id=group, reward=reward)
    return Waiting(trajectory_id=trajectory_id, samples=(one,))


def test_whole_groups_wait_until_settled_and_join_a_step_together():
    # a1 and b1 came first, but their groups still have an undecided session; c is settled
    queue = [
        member("a1", "a", 1.0),
        member("b1", "b", 0.0),
        member("c1", "c", 1.0),
        member("a2", "a", 0.0),
        member("c2", "c", 0.0),
        member("c3", "c", 0.0),
    ]
    assert waiting_sample_count(queue, unsettled={"a", "b"}) == 3
    assert is_ready(queue, samples_per_step=3, unsettled={"a", "b"})
    assert not is_ready(queue, samples_per_step=4, unsettled={"a", "b"})
    batch = take_batch(queue, current_version=4, eta=2, samples_per_step=2, unsettled={"a", "b"})
    assert list(batch.trained) == ["c1", "c2", "c3"]  # the whole group, past samples_per_step
    assert ids(batch.waiting) == ["a1", "b1", "a2"]
    # once `a` settles, both its trajectories go together, oldest group first
    batch = take_batch(batch.waiting, current_version=4, eta=2, samples_per_step=1, unsettled={"b"})
    assert list(batch.trained) == ["a1", "a2"]
    assert ids(batch.waiting) == ["b1"]
    # without `unsettled`, trajectories are taken one by one as before, groups or not
    plain = take_batch(queue, current_version=4, eta=2, samples_per_step=2)
    assert list(plain.trained) == ["a1", "b1"]


def test_an_unsettled_group_that_is_due_joins_the_step_whole():
    # at lag η (2) a1 is due: the step's publication would age it past η, so group a joins, settled or not
    queue = [member("c1", "c", 1.0), member("a1", "a", 1.0, version=2), member("a2", "a", 0.0)]
    batch = take_batch(queue, current_version=4, eta=2, samples_per_step=1, max_samples=4, unsettled={"a"})
    assert list(batch.trained) == ["a1", "a2"]  # first, and enough for the step
    assert ids(batch.waiting) == ["c1"]


def test_a_group_without_a_signal_is_uniform_once_settled():
    queue = [
        member("a1", "a", 1.0),
        member("a2", "a", 1.0),  # a: both right, no signal
        member("b1", "b", 0.0),
        member("b2", "b", 1.0),  # b: a signal
        member("c1", "c", 0.0),  # c: alike so far, but a session is still undecided
        member("c2", "c", 0.0),
        member("d1", "d", 0.0),  # d: one member left (the others disqualified): alike with itself
        Waiting(trajectory_id="n", samples=(sample("n", -1, 4),)),  # no group: never uniform
    ]
    assert uniform_groups(queue, unsettled={"c"}) == ("a1", "a2", "d1")
    assert uniform_groups(queue, unsettled=set()) == ("a1", "a2", "c1", "c2", "d1")
