"""The releases and serving-history API: approval through HTTP (409, 403 and nothing changes), another tenant's
release is a 404, and "what served tenant X at time D"."""

import time

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.releases.analysis import release_analyze
from apps.releases.approval import release_approve
from apps.releases.models import Release, ReleaseStatus
from apps.releases.routing_writes import routing_initialize
from apps.releases.services import release_create, release_start
from apps.tenants.permissions import Role
from tests.releases.helpers import SYSTEM, register_versions, release_at, serve_versions

pytestmark = pytest.mark.django_db


def test_approve_over_the_api(tenant, other_tenant, api_client, member):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    before = AuditEvent.objects.filter(tenant=tenant).exclude(verb__startswith="auth.").count()
    for role in (Role.ANNOTATOR, Role.VIEWER):
        response = api_client(user=member(role)).post(f"/api/v1/releases/{release.pk}/approve/")
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "role_forbidden"
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL
    assert AuditEvent.objects.filter(tenant=tenant).exclude(verb__startswith="auth.").count() == before
    outsider = api_client(user=member(Role.OPERATOR, of=other_tenant))
    assert (
        outsider.post(f"/api/v1/releases/{release.pk}/approve/", HTTP_X_TENANT=other_tenant.slug).status_code
        == 404
    )
    assert outsider.get(f"/api/v1/releases/{release.pk}/", HTTP_X_TENANT=other_tenant.slug).status_code == 404
    assert outsider.get("/api/v1/releases/", HTTP_X_TENANT=other_tenant.slug).json()["results"] == []
    operator = api_client(user=member(Role.OPERATOR))
    response = operator.post(f"/api/v1/releases/{release.pk}/approve/")
    assert response.status_code == 200
    assert response.json()["status"] == "promoted"
    again = operator.post(f"/api/v1/releases/{release.pk}/approve/")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "not_awaiting_approval"
    detail = operator.get(f"/api/v1/releases/{release.pk}/").json()
    assert [event["to"] for event in detail["events"]] == ["promoted"]


def test_create_refusals_over_the_api(tenant, api_client):
    _, training = register_versions(tenant, name="still-training", candidate_status="training")
    response = api_client(["admin"]).post("/api/v1/releases/", {"candidate_id": training.pk}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "version_training"
    _, other = register_versions(tenant, name="other-tokenizer", candidate_tokenizer="tokenizer-b")
    response = api_client(["admin"]).post("/api/v1/releases/", {"candidate_id": other.pk}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tokenizer_mismatch"
    assert not Release.objects.exists()


def test_what_served_the_tenant_at_a_moment(
    tenant, other_tenant, api_client, member, django_capture_on_commit_callbacks
):
    baseline, candidate = register_versions(tenant)
    serve_versions(tenant, baseline, candidate)
    before_anything = timezone.now()
    time.sleep(0.01)
    routing_initialize(tenant=tenant, actor=SYSTEM, version=baseline)
    only_baseline = timezone.now()
    time.sleep(0.01)
    release = release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk, stages=[5, 100])
    with django_capture_on_commit_callbacks(execute=False):
        release_start(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    release_analyze(tenant=tenant, release_id=release.pk)
    in_canary = timezone.now()
    time.sleep(0.01)
    release_analyze(tenant=tenant, release_id=release.pk)  # → 100 %
    release_analyze(tenant=tenant, release_id=release.pk)  # → awaiting approval
    release_approve(tenant=tenant, actor=SYSTEM, release_id=release.pk)

    client = api_client(user=member(Role.VIEWER))

    def at(moment):
        response = client.get("/api/v1/serving-history/", {"model": baseline.name, "at": moment.isoformat()})
        assert response.status_code == 200, response.content
        return response.json()["serving"]

    assert at(before_anything) is None
    assert (at(only_baseline)["stable"]["number"], at(only_baseline)["canary"]) == (0, None)
    canary = at(in_canary)
    assert (canary["stable"]["number"], canary["canary"]["number"], canary["canary_percent"]) == (0, 1, 5.0)
    assert at(timezone.now())["stable"]["number"] == 1
    assert at(timezone.now())["canary"] is None
    day = client.get(
        "/api/v1/serving-history/", {"model": baseline.name, "at": timezone.now().date().isoformat()}
    )
    assert day.json()["serving"]["stable"]["number"] == 1
    history = client.get("/api/v1/serving-history/", {"model": baseline.name}).json()["results"]
    assert [
        (row["stable"]["number"], (row["canary"] or {}).get("number"), row["canary_percent"])
        for row in history
    ] == [(0, None, 0.0), (0, 1, 5.0), (0, 1, 100.0), (1, None, 0.0)]
    # The reasons name the release by the version it releases, never by its id.
    assert [row["reason"] for row in history][1:] == [
        "release of v1: canary 5 %",
        "release of v1: canary 100 %",
        "release of v1 promoted",
    ]
    bad = client.get("/api/v1/serving-history/", {"model": baseline.name, "at": "yesterday"})
    assert bad.status_code == 400
    outsider = api_client(user=member(Role.ADMIN, of=other_tenant))
    assert (
        outsider.get(
            "/api/v1/serving-history/", {"model": baseline.name}, HTTP_X_TENANT=other_tenant.slug
        ).json()["results"]
        == []
    )
    assert (
        outsider.get(
            "/api/v1/serving-history/",
            {"model": baseline.name, "at": timezone.now().isoformat()},
            HTTP_X_TENANT=other_tenant.slug,
        ).json()["serving"]
        is None
    )


def test_console_pages(tenant, other_tenant, api_client, member):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    release_approve(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    viewer = api_client(user=member(Role.VIEWER))
    assert f'data-release="{release.pk}"'.encode() in viewer.get("/releases/").content
    detail = viewer.get(f"/releases/{release.pk}/")
    assert detail.status_code == 200
    assert b'id="approve"' not in detail.content
    assert b'id="rollback"' not in detail.content
    serving = viewer.get("/serving/")
    assert serving.status_code == 200
    assert b"serving-figure" in serving.content
    assert b"promoted" in serving.content
    assert viewer.post(f"/releases/{release.pk}/rollback/").status_code == 403
    outsider = api_client(user=member(Role.ADMIN, of=other_tenant))
    assert outsider.get(f"/releases/{release.pk}/").status_code == 404
    assert f'data-release="{release.pk}"'.encode() not in outsider.get("/releases/").content
