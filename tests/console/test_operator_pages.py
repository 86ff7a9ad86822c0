"""What an operator reads before approving (issue 29): a release awaiting approval says, per guardrail, the
rule, the samples against the minimum and the 95 % interval of the candidate's deficit, in words and on a chart
(interval ribbon, the band where the guardrail fails), what approving does, and the confirmation names the
version and its share of traffic. The control plane's decision cards name versions by label, never by id."""

import json
import re

import pytest
from django.test import Client

from apps.releases.models import Release, ReleaseStatus
from apps.tenants.permissions import Role
from tests.evolution.factories import DecisionFactory, EvolutionPolicyFactory
from tests.releases.helpers import release_at
from tests.releases.test_verdicts import GUARDRAILS, arms  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def _page(member, role, path) -> str:
    client = Client()
    client.force_login(member(role))
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def _analysed(api_client, member, release):
    client = api_client(user=member(Role.OPERATOR))
    assert client.post(f"/api/v1/releases/{release.pk}/analyze/", {}, format="json").status_code == 200


def test_a_release_awaiting_approval_shows_the_decision_in_words_and_on_the_chart(
    api_client,
    member,
    tenant,
    arms,  # noqa: F811
):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, stages=[25], guardrails=GUARDRAILS)
    arms(release, candidate=[1.0] * 18 + [0.0] * 22, baseline=[1.0] * 20 + [0.0] * 20)
    _analysed(api_client, member, release)
    Release.objects.filter(pk=release.pk).update(status=ReleaseStatus.AWAITING_APPROVAL)
    candidate, baseline = f"v{release.candidate.number}", f"v{release.baseline.number}"

    page = _page(member, Role.OPERATOR, f"/releases/{release.pk}/")
    point_row = page.split('<tr data-guardrail="0"')[1].split("</tr>")[0]
    assert "higher is better; fails when the measured deficit exceeds 0.25" in point_row
    assert "40 candidate and 40 baseline samples of the 10 needed per arm" in point_row
    assert re.search(r"worse by [+-][\d.]+ to [+-][\d.]+ \(95 % interval\)", point_row)
    interval_row = page.split('<tr data-guardrail="1"')[1].split("</tr>")[0]
    assert "fails when the whole 95 % interval of the deficit exceeds 0" in interval_row

    effect = page.split('id="approval-effect">')[1].split("</p>")[0]
    assert f"promotes {candidate} of {release.model} to production" in effect
    assert f"from {baseline} to {candidate}" in effect
    assert "100 % of new sessions" in effect
    assert "it takes 25 % of them now" in effect
    question = page.split(f'action="/releases/{release.pk}/approve/" class="inline" data-confirm="')[1]
    assert question.startswith(f"Promote {candidate} of {release.model} to production? It takes 100 %")

    figures = json.loads(
        page.split('id="guardrail-figures" type="application/json">')[1].split("</script>")[0]
    )
    assert set(figures) == {"0", "1"}
    ribbon_top, ribbon_bottom, deficit = figures["0"]["data"]
    assert ribbon_bottom["fill"] == "tonexty"
    # higher is better: the deficit is baseline − candidate, 0.5 − 0.45
    assert deficit["y"] == [pytest.approx(0.05)]
    assert ribbon_bottom["y"][0] < deficit["y"][0] < ribbon_top["y"][0]
    band = figures["0"]["layout"]["shapes"][0]
    assert band["type"] == "rect"
    assert band["y0"] == 0.25  # the guardrail fails above its threshold


def test_a_viewer_reads_what_approving_does_but_gets_no_button(member, tenant):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    page = _page(member, Role.VIEWER, f"/releases/{release.pk}/")
    assert 'id="approval-effect"' in page
    assert 'id="approve"' not in page
    assert "Your role cannot approve" in page


def test_decision_cards_name_started_versions_by_label(member, tenant):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0)
    policy = EvolutionPolicyFactory(tenant=tenant, model=release.model)
    DecisionFactory(
        tenant=tenant,
        policy=policy,
        kind="train",
        status="succeeded",
        started={"versions": [release.candidate.pk]},
    )
    page = _page(member, Role.OPERATOR, f"/evolution/policies/{policy.pk}/")
    started = page.split('class="started">')[1].split("</div>")[0]
    assert f"{release.model} v{release.candidate.number}" in started
    assert f"#{release.candidate.pk}" not in started


def test_decision_cards_say_the_gate_outcome_and_name_what_they_started(member, tenant):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0)
    candidate, baseline = release.candidate.number, release.baseline.number
    policy = EvolutionPolicyFactory(tenant=tenant, model=release.model)
    gate = {"environment": "weather", "cases": 20, "seed": 7}
    evaluated = DecisionFactory(
        tenant=tenant,
        policy=policy,
        kind="evaluate",
        status="succeeded",
        version=release.candidate,
        evidence={
            "gate": gate,
            "gate_score": 1 / 3,
            "best_production_score": 0.2,
            "production_score": 0.2,
            "min_gain": 0.0,
            "passed": True,
        },
    )
    released = DecisionFactory(
        tenant=tenant,
        policy=policy,
        kind="release",
        status="running",
        version=release.candidate,
        parent=evaluated,
        evidence={"gate": gate, "gate_score": 1 / 3, "best_production_score": 0.2, "candidate": candidate},
        started={"releases": [release.pk]},
    )
    waiting = DecisionFactory(tenant=tenant, policy=policy, kind="evaluate", evidence={"gate": gate})
    page = _page(member, Role.OPERATOR, f"/evolution/policies/{policy.pk}/")

    def card(decision) -> str:
        return page.split(f'data-decision="{decision.pk}"')[1].split("</li>")[0]

    outcome = f"Gate: v{candidate}: 33 % held-out, best production 20 %; gate passed"
    assert outcome in card(evaluated)
    assert outcome in card(released)
    assert "Gate: 20 held-out cases of weather (seed 7)" in card(
        waiting
    )  # not measured yet: the gate it runs
    assert "{&#x27;" not in page  # no Python dict on the page
    assert "{'environment'" not in page
    started = card(released).split('class="started">')[1].split("</div>")[0]
    assert f"release of v{candidate} over v{baseline}" in started
    assert f'href="/releases/{release.pk}/"' in started  # the link keeps its id, the words do not
    assert f"#{release.pk}" not in started
    assert f'href="#decision-{evaluated.pk}">after the evaluate decision on v{candidate}</a>' in card(
        released
    )


def test_a_release_plan_takes_its_guardrails_as_rows_of_fields(member, tenant):
    from tests.releases.helpers import register_versions

    _, candidate = register_versions(tenant)
    client = Client()
    client.force_login(member(Role.OPERATOR))
    page = client.get("/releases/new/").content.decode()
    assert "<textarea" not in page
    assert 'name="guardrail-0-metric"' in page
    assert 'name="guardrail-3-metric"' in page  # the two defaults and two empty rows
    response = client.post(
        "/releases/new/",
        {
            "candidate": candidate.pk,
            "baseline": "",
            "stages": "10, 100",
            "stage_min_seconds": 60,
            "failure_limit": 0,
            "inconclusive_limit": 3,
            "guardrail-0-metric": "reward_mean",
            "guardrail-0-threshold": "0",
            "guardrail-0-judge": "interval",
            "guardrail-1-metric": "latency_p95",
            "guardrail-1-threshold": "50",
            "guardrail-1-min_samples": "20",
            "guardrail-2-metric": "",
        },
    )
    assert response.status_code == 302
    release = Release.objects.get(tenant=tenant)
    assert release.guardrails == [
        {
            "metric": "reward_mean",
            "direction": "higher_is_better",
            "threshold": 0.0,
            "min_samples": 30,
            "judge": "interval",
        },
        {"metric": "latency_p95", "direction": "lower_is_better", "threshold": 50.0, "min_samples": 20},
    ]


def test_an_evaluation_is_named_by_its_version_and_suite_never_by_its_id(member, tenant):
    from tests.evaluation.factories import EvalRunFactory, EvalSuiteFactory

    suite = EvalSuiteFactory(tenant=tenant, name="smoke")
    run = EvalRunFactory(
        suite=suite, status="succeeded", summary={"score": 0.5, "pass_rate": 0.5, "cases": 4}
    )
    other = EvalRunFactory(
        suite=suite, status="succeeded", summary={"score": 0.25, "pass_rate": 0.25, "cases": 4}
    )
    page = _page(member, Role.OPERATOR, f"/evaluation/runs/{run.pk}/?baseline={other.pk}")
    title = page.split("<h1>")[1].split("</h1>")[0]
    assert title == (
        f"Evaluation of {run.model_version.name} v{run.model_version.number} on <code>smoke</code>"
    )
    assert f"#{run.pk}" not in page
    assert f"#{other.pk}" not in page
    assert f"baseline v{other.model_version.number} (its run of" in page
    suite_page = _page(member, Role.OPERATOR, f"/evaluation/suites/{suite.pk}/")
    assert f'href="/evaluation/runs/{run.pk}/"' in suite_page  # the link keeps its id
    assert f">#{run.pk}<" not in suite_page


def test_a_release_page_is_named_by_what_it_releases(member, tenant):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0)
    page = _page(member, Role.VIEWER, f"/releases/{release.pk}/")
    title = page.split("<h1>")[1].split("</h1>")[0]
    assert title == (
        f"Release of <code>{release.model}</code> v{release.candidate.number} over v{release.baseline.number}"
    )
    assert f"#{release.pk}" not in page


def test_the_releases_list_and_the_serving_history_name_releases_by_their_versions(
    member, tenant, django_assert_max_num_queries
):
    from apps.releases.routing_writes import routing_set
    from tests.releases.helpers import SYSTEM

    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, stages=[10, 100])
    Release.objects.filter(pk=release.pk).update(last_verdict="successful")
    candidate, baseline = f"v{release.candidate.number}", f"v{release.baseline.number}"
    page = _page(member, Role.OPERATOR, "/releases/")
    row = page.split(f'data-release="{release.pk}"')[1].split("</tr>")[0]
    assert f">{candidate} over {baseline}</a>" in row
    assert f"{candidate} takes 10 % of new sessions (stage 1 of 2); the last tick passed." in row
    assert f"#{release.pk}" not in page

    for percent in (10, 20, 30, 40, 50, 60):
        routing_set(
            tenant=tenant,
            model=release.model,
            stable=release.baseline,
            canary=release.candidate,
            percent=percent,
            release=release,
            actor=SYSTEM,
            reason="canary",
        )
    client = Client()
    client.force_login(member(Role.VIEWER))
    client.get("/serving/")  # the session and the permissions read once
    with django_assert_max_num_queries(8):  # six events: their releases' versions come with the rows
        serving = client.get("/serving/").content.decode()
    assert f'href="/releases/{release.pk}/">release of {candidate}</a>' in serving
    assert f">#{release.pk}<" not in serving


def test_the_models_page_says_each_versions_gate_score_in_words(member, tenant):
    from tests.training.factories import ModelVersionFactory

    measured = ModelVersionFactory(
        tenant=tenant, metrics={"gate": {"weather:20:7": {"score": 1 / 3, "cases": 20, "reasons": {}}}}
    )
    unmeasured = ModelVersionFactory(tenant=tenant, name=measured.name, number=measured.number + 1)
    page = _page(member, Role.VIEWER, "/models/")
    cell = page.split(f'data-version="{measured.pk}"')[1].split("</tr>")[0]
    assert '<div class="gate-score">weather held-out: 33 % of 20 cases (seed 7)</div>' in cell
    other = page.split(f'data-version="{unmeasured.pk}"')[1].split("</tr>")[0]
    assert "not evaluated" in other
