"""A release's verdicts in words (issue 26, finding 11): each guardrail row has its own name (two guardrails
watch `reward_mean`: a loose point threshold and a strict 95 % interval), and each says what was compared,
with the interval's bounds, the threshold and the sample counts, over REST and on the release page. The
verdict itself: a candidate worse than the baseline by more than the allowed deficit does not pass. The
per-arm samples of live traffic are given (apps/releases/measure.py reads them from trajectories)."""

import pytest
from django.test import Client

from apps.releases.models import ReleaseStatus
from apps.tenants.permissions import Role
from tests.releases.helpers import release_at

pytestmark = pytest.mark.django_db
GUARDRAILS = [
    {"metric": "reward_mean", "direction": "higher_is_better", "threshold": 0.25, "min_samples": 10},
    {
        "metric": "reward_mean",
        "direction": "higher_is_better",
        "threshold": 0.0,
        "min_samples": 10,
        "judge": "interval",
    },
]
POINT, INTERVAL = "reward_mean (point, worse by ≤ 0.25)", "reward_mean (95 % interval, worse by ≤ 0)"


@pytest.fixture
def arms(monkeypatch):
    """Sets the rewards each arm's live traffic had: arms(candidate=[...], baseline=[...])."""
    values = {}

    def samples(*, tenant, model, version, since):
        arm = "candidate" if version == values["candidate_version"] else "baseline"
        return {"reward_mean": values[arm], "error_rate": [], "latency_p95": [], "cost_per_task": []}

    monkeypatch.setattr("apps.releases.measure.arm_samples", samples)

    def give(release, *, candidate, baseline):
        values.update(candidate=candidate, baseline=baseline, candidate_version=str(release.candidate.number))

    return give


def _analysed(api_client, member, release):
    client = api_client(user=member(Role.OPERATOR))
    assert client.post(f"/api/v1/releases/{release.pk}/analyze/", {}, format="json").status_code == 200
    detail = client.get(f"/api/v1/releases/{release.pk}/").json()
    return detail, detail["analyses"][-1]


def test_each_guardrail_is_named_and_says_what_was_compared(api_client, member, tenant, arms):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, guardrails=GUARDRAILS)
    # 45 % against 50 % over 40 sessions each: a little worse, within 0.25, and not significantly worse.
    arms(release, candidate=[1.0] * 18 + [0.0] * 22, baseline=[1.0] * 20 + [0.0] * 20)
    detail, analysis = _analysed(api_client, member, release)
    assert analysis["verdict"] == "successful"
    point, interval = analysis["measurements"]
    assert [point["name"], interval["name"]] == [POINT, INTERVAL]
    assert [point["guardrail"], interval["guardrail"]] == [0, 1]
    compared = "mean reward: candidate 0.45 (n=40) vs baseline 0.5 (n=40), higher is better"
    assert point["reason"] == (
        f"{compared}; the candidate is worse by 0.05, within the allowed deficit of 0.25 (95 % interval of "
        f"candidate − baseline [{point['low']:+.4g}, {point['high']:+.4g}]): successful"
    )
    assert interval["low"] < 0 < interval["high"]
    assert interval["reason"] == (
        f"{compared}; the candidate is worse by 0.05; 95 % interval of candidate − baseline "
        f"[{interval['low']:+.4g}, {interval['high']:+.4g}]: the interval includes no deficit at all, not more "
        "than the allowed deficit of 0 (this judge fails a candidate only when the whole interval is worse by "
        "more than 0): successful"
    )

    client = Client()
    client.force_login(member(Role.VIEWER))
    page = client.get(f"/releases/{release.pk}/").content.decode()
    rows = page.split('<tr data-guardrail="')[1:]
    assert [row.split("</tr>")[0].split('<td class="name">')[1].split("</td>")[0] for row in rows] == [
        POINT,
        INTERVAL,
    ]
    assert "within the allowed deficit of 0.25" in rows[0]
    assert "the interval includes no deficit at all" in rows[1]
    assert "the interval includes no deficit at all" not in rows[0]


def test_a_candidate_worse_than_the_allowed_deficit_does_not_pass(api_client, member, tenant, arms):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, guardrails=GUARDRAILS)
    # 10 % against 50 %: worse by 0.4, beyond the point threshold 0.25 and significantly worse than 0.
    arms(release, candidate=[1.0] * 4 + [0.0] * 36, baseline=[1.0] * 20 + [0.0] * 20)
    detail, analysis = _analysed(api_client, member, release)
    assert analysis["verdict"] == "failed"
    point, interval = analysis["measurements"]
    assert (point["verdict"], interval["verdict"]) == ("failed", "failed")
    assert "the candidate is worse by 0.4, more than the allowed deficit of 0.25" in point["reason"]
    assert interval["high"] < 0
    assert (
        f"over the whole interval the candidate is worse by at least {-interval['high']:.4g}, more than the "
        "allowed deficit of 0"
    ) in interval["reason"]
    assert detail["status"] == ReleaseStatus.ROLLED_BACK
    assert POINT in detail["status_reason"]


@pytest.mark.parametrize(
    ("candidate", "verdict"),
    [
        ([1.0] * 9 + [0.0] * 31, "failed"),  # 22.5 % against 50 %: worse by 0.275 > 0.25
        ([1.0] * 11 + [0.0] * 29, "successful"),  # 27.5 %: worse by 0.225, within 0.25
    ],
)
def test_the_point_threshold_is_the_line(api_client, member, tenant, arms, candidate, verdict):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, guardrails=GUARDRAILS[:1])
    arms(release, candidate=candidate, baseline=[1.0] * 20 + [0.0] * 20)
    _, analysis = _analysed(api_client, member, release)
    assert analysis["measurements"][0]["verdict"] == verdict
