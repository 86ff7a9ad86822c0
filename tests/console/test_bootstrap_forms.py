"""Console forms that make the loop without the API: a release drafted, started (its refusal shown) and
aborted; an alias moved on a model's page (production refused: it moves with what serves, in the API too);
an evaluation suite and its cases. Operators act, viewers only see; another tenant's objects are 404s; a
refused form keeps its input and names the field."""

import pytest
from django.test import Client

from apps.evaluation.models import EvalCase, EvalSuite
from apps.releases.models import Release, ReleaseStatus
from apps.tenants.permissions import Role
from apps.training.models import ModelAlias
from tests.evaluation.factories import EvalSuiteFactory
from tests.releases.helpers import MODEL, register_versions, serve_versions

pytestmark = pytest.mark.django_db


def _signed_in(member, role):
    client = Client()
    client.force_login(member(role))
    return client


# ---- releases ----------------------------------------------------------------------------------------------


def _release_form(candidate, **changes):
    return {
        "candidate": candidate.pk,
        "baseline": "",
        "stages": "10, 100",
        "stage_min_seconds": 60,
        "guardrail-0-metric": "error_rate",
        "guardrail-0-direction": "lower_is_better",
        "guardrail-0-threshold": "0.05",
        "guardrail-0-min_samples": "10",
        "guardrail-0-judge": "point",
        "failure_limit": 0,
        "inconclusive_limit": 3,
        **changes,
    }


def test_an_operator_drafts_a_release_starts_it_and_aborts_it(
    member, tenant, django_capture_on_commit_callbacks
):
    baseline, candidate = register_versions(tenant)
    serve_versions(tenant, baseline, candidate)
    operator = _signed_in(member, Role.OPERATOR)
    assert b'id="new-release"' in operator.get("/releases/").content
    assert operator.get("/releases/new/").status_code == 200
    created = operator.post("/releases/new/", _release_form(candidate))
    assert created.status_code == 302, created.content
    release = Release.objects.get(tenant=tenant)
    assert (release.candidate, release.baseline, release.stages) == (candidate, baseline, [10.0, 100.0])
    assert release.guardrails[0]["metric"] == "error_rate"
    with django_capture_on_commit_callbacks(execute=False):
        assert operator.post(f"/releases/{release.pk}/start/").status_code == 302
    release.refresh_from_db()
    assert release.status == ReleaseStatus.EVALUATING
    page = operator.get(f"/releases/{release.pk}/")
    assert b'id="abort"' in page.content
    assert operator.post(f"/releases/{release.pk}/abort/").status_code == 302
    release.refresh_from_db()
    assert release.status == ReleaseStatus.ABORTED


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"stages": "50, 10"}, "stages"),
        ({"stages": "half"}, "stages"),
        ({"guardrail-0-metric": "nonsense"}, "guardrail-0-metric"),
        ({"guardrail-0-threshold": ""}, "guardrail-0-threshold"),
        ({"guardrail-0-min_samples": "0"}, "guardrail-0-min_samples"),
        ({"guardrail-1-threshold": "0.1"}, "guardrail-1-metric"),
    ],
)
def test_a_bad_release_plan_names_its_field_and_creates_nothing(member, tenant, changes, field):
    _, candidate = register_versions(tenant)
    response = _signed_in(member, Role.OPERATOR).post("/releases/new/", _release_form(candidate, **changes))
    assert response.status_code == 400
    assert f'data-field="{field}"'.encode() in response.content
    assert not Release.objects.exists()


def test_a_refusal_of_the_service_is_said_at_the_top_of_the_form_with_the_input_kept(member, tenant):
    from tests.releases.helpers import release_at, version_over

    under_way = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    second = version_over(tenant, "/models/second", parent=under_way.candidate)
    operator = _signed_in(member, Role.OPERATOR)
    response = operator.post("/releases/new/", _release_form(second, stages="10, 50, 100"))
    assert response.status_code == 400
    page = response.content.decode()
    errors = page.split('<div class="errors" id="form-errors" role="alert">')[1].split("</div>")[0]
    assert (
        f"The release was not created: another release of {MODEL} is active; finish or abort it first."
    ) in errors
    assert page.index('id="form-errors"') < page.index('name="candidate"')  # above the fields
    assert 'value="10, 50, 100"' in page  # what was typed is kept
    assert f'<option value="{second.pk}" selected>{MODEL} v{second.number} (candidate)</option>' in page
    assert Release.objects.filter(tenant=tenant).count() == 1


def test_a_drafted_release_is_announced_by_its_versions(member, tenant):
    baseline, candidate = register_versions(tenant)
    response = _signed_in(member, Role.OPERATOR).post("/releases/new/", _release_form(candidate), follow=True)
    assert (
        f"Drafted the release of v{candidate.number} over v{baseline.number} ({MODEL}); start it"
        in response.content.decode()
    )


def test_another_tenants_versions_and_releases_are_out_of_reach(member, tenant, other_tenant):
    _, theirs = register_versions(other_tenant)
    operator = _signed_in(member, Role.OPERATOR)
    response = operator.post("/releases/new/", _release_form(theirs))
    assert response.status_code == 400
    assert b'data-field="candidate"' in response.content
    their_release = Release.objects.create(
        tenant=other_tenant, model=MODEL, candidate=theirs, baseline=theirs.parent
    )
    assert operator.post(f"/releases/{their_release.pk}/abort/").status_code == 404
    their_release.refresh_from_db()
    assert their_release.status == ReleaseStatus.DRAFT


def test_viewers_cannot_draft_or_abort(member, tenant):
    _, candidate = register_versions(tenant)
    viewer = _signed_in(member, Role.VIEWER)
    assert b'id="new-release"' not in viewer.get("/releases/").content
    assert viewer.post("/releases/new/", _release_form(candidate)).status_code == 403
    assert not Release.objects.exists()


# ---- aliases -----------------------------------------------------------------------------------------------


def test_an_operator_moves_a_named_alias_but_not_production(member, api_client, tenant, other_tenant):
    baseline, candidate = register_versions(tenant)
    operator = _signed_in(member, Role.OPERATOR)
    page = operator.get(f"/models/{MODEL}/lineage/")
    assert b'id="alias-form"' in page.content
    moved = operator.post(f"/models/{MODEL}/alias/", {"alias": "staging", "version": candidate.pk})
    assert moved.status_code == 302
    assert ModelAlias.objects.get(tenant=tenant, alias="staging").version == candidate
    refused = operator.post(f"/models/{MODEL}/alias/", {"alias": "production", "version": candidate.pk})
    assert refused.status_code == 400
    assert b"moves with what serves" in refused.content
    assert ModelAlias.objects.get(tenant=tenant, alias="production").version == baseline
    api = api_client().post(
        "/api/v1/model-aliases/", {"alias": "production", "version_id": candidate.pk}, format="json"
    )
    assert api.status_code == 409
    assert api.json()["error"]["code"] == "alias_moves_with_serving"
    assert ModelAlias.objects.get(tenant=tenant, alias="production").version == baseline
    register_versions(other_tenant, name="theirs")
    assert operator.post("/models/theirs/alias/", {"alias": "x", "version": candidate.pk}).status_code == 404
    viewer = _signed_in(member, Role.VIEWER)
    assert b'id="alias-form"' not in viewer.get(f"/models/{MODEL}/lineage/").content
    assert viewer.post(f"/models/{MODEL}/alias/", {"alias": "x", "version": candidate.pk}).status_code == 403


# ---- evaluation suites and cases ---------------------------------------------------------------------------


def test_an_operator_creates_a_suite_and_adds_cases(member, tenant):
    operator = _signed_in(member, Role.OPERATOR)
    assert b'id="suite-form"' in operator.get("/evaluation/").content
    created = operator.post("/evaluation/suites/new/", {"name": "smoke", "kind": "regression"})
    assert created.status_code == 302
    suite = EvalSuite.objects.get(tenant=tenant, name="smoke")
    duplicate = operator.post("/evaluation/suites/new/", {"name": "smoke", "kind": "regression"})
    assert duplicate.status_code == 400
    assert b"already has a suite" in duplicate.content
    case = {
        "key": "capital",
        "category": "regression",
        "system": "Answer in one word.",
        "user": "Capital of France?",
        "scorer": "exact_match",
        "scorer_config": '{"expected": "Paris"}',
    }
    assert operator.post(f"/evaluation/suites/{suite.pk}/cases/", case).status_code == 302
    stored = EvalCase.objects.get(suite=suite, key="capital")
    assert stored.input_messages == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert stored.scorer_config == {"expected": "Paris"}
    bad = operator.post(f"/evaluation/suites/{suite.pk}/cases/", {**case, "key": "regex", "scorer": "regex"})
    assert bad.status_code == 400  # a regex scorer needs a pattern: the service's field error is shown
    assert b"data-field=" in bad.content
    assert not EvalCase.objects.filter(key="regex").exists()
    not_json = operator.post(
        f"/evaluation/suites/{suite.pk}/cases/", {**case, "key": "x", "scorer_config": "{"}
    )
    assert not_json.status_code == 400
    assert b'data-field="scorer_config"' in not_json.content


def test_suites_of_another_tenant_and_viewers(member, tenant, other_tenant):
    theirs = EvalSuiteFactory(tenant=other_tenant)
    operator = _signed_in(member, Role.OPERATOR)
    case = {
        "key": "k",
        "category": "regression",
        "user": "hi",
        "scorer": "regex",
        "scorer_config": '{"pattern": "."}',
    }
    assert operator.post(f"/evaluation/suites/{theirs.pk}/cases/", case).status_code == 404
    assert not EvalCase.objects.filter(suite=theirs).exists()
    viewer = _signed_in(member, Role.VIEWER)
    assert b'id="suite-form"' not in viewer.get("/evaluation/").content
    assert viewer.post("/evaluation/suites/new/", {"name": "nope", "kind": "regression"}).status_code == 403
    assert not EvalSuite.objects.filter(tenant=tenant).exists()


# ---- annotation queues -------------------------------------------------------------------------------------


def test_an_operator_creates_an_annotation_queue_filled_at_once(member, tenant, other_tenant):
    from apps.annotation.models import AnnotationQueue
    from tests.rewards.factories import make_spec
    from tests.trajectories.factories import TrajectoryFactory

    spec = make_spec(tenant)
    theirs = make_spec(other_tenant)
    TrajectoryFactory(tenant=tenant, status="complete", purpose="production", task_id="weather")
    annotator = member(Role.ANNOTATOR)
    viewer_user = member(Role.VIEWER)
    operator = _signed_in(member, Role.OPERATOR)
    page = operator.get("/annotation/")
    assert b'id="queue-form"' in page.content
    assert f'value="{theirs.pk}"'.encode() not in page.content
    assert f'value="{viewer_user.pk}"'.encode() not in page.content  # viewers do not label
    form = {
        "name": "weather answers",
        "spec": spec.pk,
        "purpose": "production",
        "status": "complete",
        "task_id": "weather",
        "annotators_per_item": 1,
        "assignees": [annotator.pk],
    }
    assert operator.post("/annotation/new/", {**form, "spec": theirs.pk}).status_code == 400
    assert operator.post("/annotation/new/", {**form, "annotators_per_item": 0}).status_code == 400
    assert not AnnotationQueue.objects.exists()
    assert operator.post("/annotation/new/", form).status_code == 302
    queue = AnnotationQueue.objects.get(tenant=tenant)
    assert queue.filters == {"purpose": "production", "status": "complete", "task_id": "weather"}
    assert list(queue.assignees.all()) == [annotator]
    assert queue.items.count() == 1
    again = operator.post("/annotation/new/", form)
    assert again.status_code == 400
    assert b"exists" in again.content
    viewer = Client()
    viewer.force_login(viewer_user)
    assert viewer.post("/annotation/new/", {**form, "name": "other"}).status_code == 403
    assert AnnotationQueue.objects.count() == 1
