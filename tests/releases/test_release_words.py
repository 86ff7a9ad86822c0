"""A release in words (apps/releases/release_words.py): named by what it releases, never by its id, and where
it stands or how it ended in a sentence with its versions and share of traffic."""

from types import SimpleNamespace

import pytest

from apps.releases.choices import ReleaseStatus
from apps.releases.release_words import release_outcome, release_title


def _release(status, **fields):
    values = {
        "candidate": SimpleNamespace(number=3),
        "baseline": SimpleNamespace(number=2),
        "status": status,
        "status_reason": "",
        "stages": [10, 50, 100],
        "stage_index": -1,
        "last_verdict": "",
        "approved_by": "",
    }
    values.update(fields)
    release = SimpleNamespace(**values)
    release.stage_percent = (
        float(release.stages[release.stage_index]) if 0 <= release.stage_index < len(release.stages) else 0.0
    )
    return release


def test_a_release_is_named_by_what_it_releases():
    assert release_title(_release(ReleaseStatus.DRAFT)) == "release of v3 over v2"


@pytest.mark.parametrize(
    ("status", "fields", "sentence"),
    [
        (ReleaseStatus.DRAFT, {}, "v3 over v2, drafted: not started yet."),
        (
            ReleaseStatus.EVALUATING,
            {},
            "v3 and v2 are evaluated offline; the canary starts once the runs pass.",
        ),
        (
            ReleaseStatus.CANARY,
            {"stage_index": 0, "last_verdict": "successful"},
            "v3 takes 10 % of new sessions (stage 1 of 3); the last tick passed.",
        ),
        (
            ReleaseStatus.CANARY,
            {"stage_index": 1},
            "v3 takes 50 % of new sessions (stage 2 of 3); no tick analysed yet.",
        ),
        (
            ReleaseStatus.PAUSED,
            {"stage_index": 1, "last_verdict": "inconclusive"},
            "Paused with v3 on 50 % of new sessions: the guardrails stayed inconclusive; an operator resumes or "
            "rolls it back.",
        ),
        (
            ReleaseStatus.AWAITING_APPROVAL,
            {"stage_index": 2},
            "v3 passed every stage up to 100 % of new sessions; it awaits approval to replace v2.",
        ),
        (
            ReleaseStatus.PROMOTED,
            {"stage_index": 2, "approved_by": "alice"},
            "v3 promoted to production by alice; v2 retired.",
        ),
        (
            ReleaseStatus.ROLLED_BACK,
            {"stage_index": 0, "status_reason": "reward_mean failed twice."},
            "Rolled back to v2: reward_mean failed twice.",
        ),
        (ReleaseStatus.ABORTED, {}, "Aborted; v2 serves every session."),
    ],
)
def test_where_a_release_stands_in_a_sentence(status, fields, sentence):
    assert release_outcome(_release(status, **fields)) == sentence
