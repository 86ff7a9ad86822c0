"""Serving outside a release (apps/releases/serving.py) and a release's candidate on a serving slot
(apps/releases/provisioning.py), through the REST API and the console's Serving page: a model's first
production version, direct publication writing the serving history, and a release that loads its candidate or
refuses with the reason. Backends are scripted stand-ins on loopback."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.inference.models import BackendKind
from apps.releases.models import Release, ReleaseStatus, RoutingState, ServingEvent
from apps.releases.services import release_create
from apps.tenants.permissions import Role
from apps.training.models import VersionStatus
from apps.training.selectors import alias_resolve
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, register_versions, version_over, weights

pytestmark = pytest.mark.django_db
LOADS = {("POST", "/admin/load"): (200, {}, {"ok": True})}


# ---- a model's first production version ------------------------------------------------------------------


def test_an_operator_makes_a_models_first_version_production(api_client, member, tenant, tmp_path):
    base = version_over(tenant, tmp_path / "v0")
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="0")
    client = api_client(user=member(Role.OPERATOR))
    response = client.post(
        "/api/v1/routing/", {"version_id": base.pk, "reason": "first serve"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["model"], body["stable"]["number"], body["canary"]) == (MODEL, 0, None)
    base.refresh_from_db()
    assert base.status == VersionStatus.PRODUCTION
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == base
    (event,) = ServingEvent.objects.filter(tenant=tenant)
    assert (event.stable, event.reason) == (base, "first serve")
    assert AuditEvent.objects.filter(tenant=tenant, verb="routing.set").count() == 1

    again = client.post("/api/v1/routing/", {"version_id": base.pk}, format="json")
    assert again.status_code == 200
    assert ServingEvent.objects.filter(tenant=tenant).count() == 1  # idempotent
    listed = api_client(user=member(Role.VIEWER)).get("/api/v1/routing/").json()["results"]
    assert [(row["model"], row["stable"]["number"]) for row in listed] == [(MODEL, 0)]


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.VIEWER])
def test_people_who_may_not_manage_releases_cannot_set_production(api_client, member, tenant, tmp_path, role):
    base = version_over(tenant, tmp_path / "v0")
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="0")
    response = api_client(user=member(role)).post("/api/v1/routing/", {"version_id": base.pk}, format="json")
    assert response.status_code == 403
    assert not RoutingState.objects.exists()
    base.refresh_from_db()
    assert base.status == VersionStatus.CANDIDATE


def test_production_is_refused_with_the_reason_and_changes_nothing(api_client, tenant, tmp_path):
    client = api_client()
    base = version_over(tenant, tmp_path / "v0")
    unserved = client.post("/api/v1/routing/", {"version_id": base.pk}, format="json")
    assert unserved.status_code == 409
    assert unserved.json()["error"]["code"] == "version_not_served"
    assert "register one whose model version is 0" in unserved.json()["error"]["message"]
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="0")
    assert client.post("/api/v1/routing/", {"version_id": base.pk}, format="json").status_code == 200
    later = version_over(tenant, tmp_path / "v1", parent=base)
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="1")
    taken = client.post("/api/v1/routing/", {"version_id": later.pk}, format="json")
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "production_exists"
    later.refresh_from_db()
    assert later.status == VersionStatus.CANDIDATE
    assert RoutingState.objects.get(tenant=tenant).stable == base


def test_production_waits_for_a_release_under_way(api_client, tenant):
    baseline, candidate = register_versions(tenant, name="released")
    release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    BackendFactory(tenant=tenant, served_model="released", model_version="0")
    response = api_client().post("/api/v1/routing/", {"version_id": baseline.pk}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "release_under_way"
    assert not ServingEvent.objects.exists()


@pytest.mark.parametrize(("body", "field"), [({}, "version_id"), ({"version_id": "v0"}, "version_id")])
def test_bad_input_names_the_field(api_client, tenant, body, field):
    response = api_client().post("/api/v1/routing/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_another_tenants_version_is_a_404_and_their_routing_is_invisible(
    api_client, tenant, other_tenant, tmp_path
):
    theirs = version_over(other_tenant, tmp_path / "theirs")
    BackendFactory(tenant=other_tenant, served_model=MODEL, model_version="0")
    response = api_client().post("/api/v1/routing/", {"version_id": theirs.pk}, format="json")
    assert response.status_code == 404
    assert not RoutingState.objects.exists()
    assert (
        api_client(of=other_tenant)
        .post("/api/v1/routing/", {"version_id": theirs.pk}, format="json")
        .status_code
        == 200
    )
    assert api_client(["trajectories:read"]).get("/api/v1/routing/").json()["results"] == []


def test_the_serving_page_sets_production_for_operators(member, tenant, other_tenant, tmp_path):
    base = version_over(tenant, tmp_path / "v0")
    theirs = version_over(other_tenant, tmp_path / "theirs")
    operator = Client()
    operator.force_login(member(Role.OPERATOR))
    page = operator.get("/serving/")
    assert b'id="production-form"' in page.content
    assert f'value="{theirs.pk}"'.encode() not in page.content
    refused = operator.post("/serving/production/", {"version": base.pk})
    assert refused.status_code == 400
    assert b"no backend of" in refused.content
    foreign = operator.post("/serving/production/", {"version": theirs.pk})
    assert foreign.status_code == 400
    assert b'data-field="version"' in foreign.content
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="0")
    assert operator.post("/serving/production/", {"version": base.pk}).status_code == 302
    assert RoutingState.objects.get(tenant=tenant).stable == base
    assert not RoutingState.objects.filter(tenant=other_tenant).exists()
    viewer = Client()
    viewer.force_login(member(Role.VIEWER))
    assert b'id="production-form"' not in viewer.get("/serving/").content
    assert viewer.post("/serving/production/", {"version": base.pk}).status_code == 403


# ---- direct publication ----------------------------------------------------------------------------------


def test_direct_publication_serves_the_version_and_writes_the_serving_history(api_client, tenant, tmp_path):
    base = version_over(tenant, weights(tmp_path / "v0"))
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        client = api_client()
        assert client.post("/api/v1/routing/", {"version_id": base.pk}, format="json").status_code == 200
        trained = version_over(tenant, weights(tmp_path / "v1"), parent=base)
        response = client.post(f"/api/v1/model-versions/{trained.pk}/publish/")
    assert response.status_code == 200, response.content
    assert [row["ok"] for row in response.json()["backends"]] == [True]
    assert received == [("POST", "/admin/load")]
    base.refresh_from_db()
    trained.refresh_from_db()
    assert (base.status, trained.status) == (VersionStatus.RETIRED, VersionStatus.PRODUCTION)
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == trained
    assert RoutingState.objects.get(tenant=tenant).stable == trained
    latest = ServingEvent.objects.filter(tenant=tenant).last()
    assert latest.stable == trained
    assert "loaded on slot-a" in latest.reason
    history = (
        api_client(["trajectories:read"]).get("/api/v1/serving-history/", {"model": MODEL}).json()["results"]
    )
    assert [row["stable"]["number"] for row in history] == [0, 1]


def test_direct_publication_is_refused_during_a_release_before_any_load(api_client, tenant):
    baseline, candidate = register_versions(tenant)
    release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="0")
        response = api_client().post(f"/api/v1/model-versions/{candidate.pk}/publish/")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "release_under_way"
    assert received == []
    assert not ServingEvent.objects.exists()


# ---- a release loads its candidate -----------------------------------------------------------------------


def _release(tenant, tmp_path, *, candidate_weights=True):
    baseline = version_over(tenant, weights(tmp_path / "v0"), status=VersionStatus.PRODUCTION)
    from apps.training.services import alias_move

    alias_move(tenant=tenant, actor=SYSTEM, name=MODEL, alias="production", version=baseline)
    candidate_dir = weights(tmp_path / "v1") if candidate_weights else tmp_path / "nothing"
    candidate = version_over(tenant, candidate_dir, parent=baseline)
    return release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk, stages=[50])


def test_starting_a_release_loads_the_candidate_on_a_free_serving_slot(
    api_client, member, tenant, tmp_path, django_capture_on_commit_callbacks
):
    release = _release(tenant, tmp_path)
    with (
        scripted_http_server(LOADS) as (url_a, received_a),
        scripted_http_server(LOADS) as (url_b, received_b),
    ):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url_a, served_model=MODEL, model_version="0")
        slot_b = BackendFactory(
            tenant=tenant, name="slot-b", base_url=url_b, served_model=MODEL, model_version="0"
        )
        BackendFactory(  # cannot take weights: never a slot
            tenant=tenant,
            name="hosted",
            kind=BackendKind.OPENAI_COMPATIBLE,
            served_model=MODEL,
            model_version="",
        )
        with django_capture_on_commit_callbacks(execute=False):
            response = api_client(user=member(Role.OPERATOR)).post(f"/api/v1/releases/{release.pk}/start/")
    assert response.status_code == 200, response.content
    assert (received_a, received_b) == ([], [("POST", "/admin/load")])  # production keeps slot A
    slot_b.refresh_from_db()
    assert slot_b.model_version == "1"
    release.refresh_from_db()
    assert release.status == ReleaseStatus.EVALUATING
    assert "loaded on slot-b" in release.status_reason


def test_a_candidate_already_served_is_not_loaded_again(
    api_client, tenant, tmp_path, django_capture_on_commit_callbacks
):
    release = _release(tenant, tmp_path)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="0")
        BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="1")
        with django_capture_on_commit_callbacks(execute=False):
            response = api_client().post(f"/api/v1/releases/{release.pk}/start/")
    assert response.status_code == 200
    assert received == []


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("one_slot", "no_free_slot"),
        ("no_weights", "version_has_no_weights"),
        ("load_fails", "provision_failed"),
    ],
)
def test_a_release_that_cannot_be_served_is_refused_and_stays_a_draft(
    api_client, tenant, tmp_path, setup, code
):
    release = _release(tenant, tmp_path, candidate_weights=setup != "no_weights")
    routes = (
        {("POST", "/admin/load"): (500, {}, {"error": "out of memory"})} if setup == "load_fails" else LOADS
    )
    with scripted_http_server(routes) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        if setup != "one_slot":
            BackendFactory(tenant=tenant, name="slot-b", base_url=url, served_model=MODEL, model_version="")
        response = api_client().post(f"/api/v1/releases/{release.pk}/start/")
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == code
    if setup == "load_fails":
        assert "out of memory" in error["message"]
    else:
        assert received == []
    release.refresh_from_db()
    assert release.status == ReleaseStatus.DRAFT
    assert not Release.objects.exclude(status=ReleaseStatus.DRAFT).exists()


def test_the_consoles_start_button_shows_the_refusal(member, tenant, tmp_path):
    release = _release(tenant, tmp_path)
    BackendFactory(tenant=tenant, served_model=MODEL, model_version="0")
    operator = Client()
    operator.force_login(member(Role.OPERATOR))
    page = operator.post(f"/releases/{release.pk}/start/", follow=True)
    assert b"no serving slot is free" in page.content
    release.refresh_from_db()
    assert release.status == ReleaseStatus.DRAFT
