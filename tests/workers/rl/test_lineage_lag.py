"""The lag rule (workers.rl.staleness.Lineage): lag counted in training steps along the parent chain of
versions, not in model-wide version numbers; due trajectories trained rather than dropped; the learner holding
while what serves is η behind it."""

from tests.workers.rl.test_staleness import ids, sample, waiting
from workers.rl.staleness import (
    Lineage,
    classify,
    lag_histogram,
    relabel,
    take_batch,
)

# A first learner from the base v0 published v1..v8; production was promoted to v4; the learner was restarted
# from production and its first version took the next free number, v9 (then v10).
PARENTS = {0: None, 1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6, 8: 7, 9: 4, 10: 9}


def test_the_lag_of_an_ancestor_is_its_distance_along_the_chain():
    lineage = Lineage(current=10, parents=PARENTS)
    assert lineage.lag(10) == 0
    assert lineage.lag(9) == 1
    assert lineage.lag(4) == 2  # production: two steps back, although six numbers back
    assert lineage.lag(0) == 6
    assert lineage.lag(-1) == 0  # context, or unknown: never aged here


def test_a_version_on_another_branch_is_as_far_as_the_path_through_the_common_ancestor():
    lineage = Lineage(current=10, parents=PARENTS)
    # v6 (say a canary of the first learner): 10 → 9 → 4 is two steps, 4 → 5 → 6 two more
    assert lineage.lag(6) == 4
    assert lineage.lag(8) == 6


def test_a_version_the_lineage_does_not_know_counts_in_numbers():
    assert Lineage(current=10, parents=PARENTS).lag(3) == 3  # known: v3 is an ancestor of v4
    assert Lineage(current=10, parents={}).lag(3) == 7
    assert Lineage(current=10, parents={}).lag(12) == 0


def test_advancing_the_lineage_adds_one_step_to_every_lag():
    lineage = Lineage(current=10, parents=PARENTS)
    later = lineage.advanced(11)
    assert later.current == 11
    assert [later.lag(version) for version in (11, 10, 4, 6)] == [0, 1, 3, 5]


def test_after_a_restart_production_s_rollouts_are_fresh_along_the_chain_and_stale_by_numbers():
    queue = [waiting("served-by-production", (4,), (4,)), waiting("served-by-v9", (9,))]
    lineage = Lineage(current=10, parents=PARENTS)
    by_numbers = take_batch(queue, current_version=10, eta=3, samples_per_step=3)
    assert by_numbers.stale == ("served-by-production",)  # 10 − 4 = 6 > η: the old rule dropped it
    by_chain = take_batch(queue, current_version=10, eta=3, samples_per_step=3, lineage=lineage)
    assert by_chain.stale == ()
    assert by_chain.trained == ("served-by-production", "served-by-v9")
    # relabelled V − lag: the trainer's histogram and the log-linear proximal see 2 and 1 steps, not 6 and 1
    assert [taken.versions for taken in by_chain.samples] == [(8,), (8,), (9,)]


def test_classify_at_intake_uses_the_lineage_too():
    from tests.workers.atdp.fixtures import make_trajectory

    record = make_trajectory()  # generated tokens by versions 7 and 8
    parents = {7: None, 8: 7, 20: 8}  # v20: a restarted learner's first version, one step after v8
    by_numbers = classify(["t"], {"t": record}, current_version=20, eta=2)
    assert by_numbers.stale == ("t",)
    by_chain = classify(
        ["t"], {"t": record}, current_version=20, eta=2, lineage=Lineage(current=20, parents=parents)
    )
    assert ids(by_chain.waiting) == ["t"]
    # the waiting samples keep the versions their tokens were sampled by
    assert {version for version in by_chain.waiting[0].samples[0].versions if version >= 0} == {7, 8}


def test_due_trajectories_join_the_step_rather_than_being_dropped_at_the_next():
    parents = {version: version - 1 for version in range(1, 10)}
    lineage = Lineage(current=5, parents=parents)
    queue = [
        waiting("young-1", (5,)),
        waiting("young-2", (5,)),
        waiting("due", (3,)),  # lag 2 = η: the next publication ages it past the bound
        waiting("young-3", (4,)),
    ]
    plain = take_batch(queue, current_version=5, eta=2, samples_per_step=2, lineage=lineage)
    assert plain.trained == ("young-1", "young-2")
    after = take_batch(
        plain.waiting, current_version=6, eta=2, samples_per_step=2, lineage=lineage.advanced(6)
    )
    assert after.stale == ("due",)  # the old order: a step later it is dropped
    paced = take_batch(queue, current_version=5, eta=2, samples_per_step=2, lineage=lineage, max_samples=4)
    assert paced.trained == ("young-1", "due")  # due first, then the oldest until the step is full
    assert ids(paced.waiting) == ["young-2", "young-3"]
    assert paced.stale == ()
    # within max_samples only: a due trajectory that does not fit waits (and may age out)
    tight = take_batch(
        [waiting("big-due", (3,), (3,), (3,))],
        current_version=5,
        eta=2,
        samples_per_step=1,
        lineage=lineage,
        max_samples=2,
    )
    assert tight.trained == ("big-due",)  # not due-first, but still the oldest when the step fills
    assert len(tight.samples) == 3


def test_the_histogram_counts_samples_by_their_oldest_tokens_lag():
    lineage = Lineage(current=10, parents=PARENTS)
    samples = [sample("a", -1, 10), sample("b", 9, 4), sample("c", 4), sample("d", -1, -1)]
    assert lag_histogram(samples, lineage) == {0: 2, 2: 2}
    # relabelled (V − lag), plain differences of numbers give the same lags
    relabelled = [relabel(item, lineage) for item in samples]
    assert lag_histogram(relabelled, Lineage(current=10)) == {0: 2, 2: 2}
