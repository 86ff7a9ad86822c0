"""Per-token versions derived from a backend's served version and weight swaps (workers/inference/swaps.py)."""

from workers.inference.swaps import (
    ServedVersions,
    WeightSwap,
    answer_versions,
    as_version,
    stream_versions,
    swaps_from_json,
    swaps_to_json,
)

# version 3 until a swap paused at 10.0 and resumed at 12.0 on version 4; then 5 from 20.0 (pending)
SERVED = ServedVersions((WeightSwap("3", "4", 10.0, 12.0), WeightSwap("4", "5", 20.0, None)))


def test_the_version_at_a_moment_changes_at_each_resume_not_at_the_pause():
    assert [SERVED.version_at(moment) for moment in (9.0, 11.0, 12.0, 15.0, 25.0)] == [
        "3",
        "3",
        "4",
        "4",
        "4",
    ]
    assert SERVED.current == "5"
    assert SERVED.pending_since(21.0)
    assert not SERVED.pending_since(19.0)
    assert not SERVED.pending_since(20.0 + 3600), "a publisher that died long ago is not waited on"


def test_a_stream_is_split_at_the_resume_by_when_its_tokens_arrived():
    arrivals = [(9.0, 2), (11.5, 1), (12.5, 2), (13.0, 1)]
    derived = stream_versions(SERVED, fallback="", arrivals=arrivals, count=6, started_at=8.0)
    assert derived.versions == (3, 3, 3, 4, 4, 4)
    assert (derived.served, derived.split, derived.swap.to_version) == ("3", "stream", "4")
    assert derived.known


def test_a_whole_answer_across_a_resume_keeps_the_old_version_and_says_the_split_is_unknown():
    across = answer_versions(SERVED, fallback="", count=3, started_at=11.0, ended_at=13.0)
    assert (across.versions, across.split, across.swap.from_version) == ((3, 3, 3), "unknown", "3")
    after = answer_versions(SERVED, fallback="", count=2, started_at=12.5, ended_at=13.0)
    assert (after.versions, after.split, after.swap) == ((4, 4), "", None)


def test_without_a_swap_record_the_row_version_is_used_and_a_non_number_is_unknown():
    assert answer_versions(None, fallback="7", count=2, started_at=0, ended_at=1).versions == (7, 7)
    unknown = stream_versions(None, fallback="v7", arrivals=[(0.5, 2)], count=2, started_at=0)
    assert unknown.versions == (-1, -1)
    assert not unknown.known
    assert [as_version(value) for value in ("12", " 3 ", "", "v7", None, -2, 5)] == [12, 3, -1, -1, -1, -1, 5]


def test_the_cached_form_round_trips_and_garbage_reads_as_no_record():
    assert swaps_from_json(swaps_to_json(SERVED)) == SERVED
    assert swaps_from_json([]) is None
    assert swaps_from_json([["3", "4", "not a moment", None]]) is None
