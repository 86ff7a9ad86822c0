"""The Models page's Publish button (apps/training/views/versions.py `model_version_publish`): direct publication as
`POST /api/v1/model-versions/<id>/publish/` does it (apps.releases.serving.version_publish_directly), the
outcome or the refusal shown as a console message. Operators and admins only; another tenant's version is a
404. Backends are scripted stand-ins on loopback, as in tests/releases/test_serving.py."""

import pytest
from django.test import Client

from apps.releases.models import RoutingState, ServingEvent
from apps.releases.services import release_create
from apps.tenants.permissions import Role
from apps.training.models import ModelVersion, VersionStatus
from apps.training.selectors import alias_resolve
from tests.inference.factories import BackendFactory
from tests.network import scripted_http_server
from tests.releases.helpers import MODEL, SYSTEM, register_versions, version_with_weights

pytestmark = pytest.mark.django_db
LOADS = {("POST", "/admin/load"): (200, {}, {"ok": True})}
BROKEN = {("POST", "/admin/load"): (500, {}, {"error": "out of memory"})}


def _console(member, role):
    client = Client()
    client.force_login(member(role))
    return client


def _messages(response) -> list[tuple[str, str]]:
    return [(message.level_tag, str(message)) for message in response.context["messages"]]


def _publish_buttons(page) -> list[int]:
    html = page.content.decode()
    return sorted(int(part.split("/")[0]) for part in html.split('action="/models/versions/')[1:])


def test_operators_get_a_publish_button_per_publishable_version(member, tenant, other_tenant, tmp_path):
    baseline, candidate = register_versions(tenant)  # v0 production, v1 candidate
    training = version_with_weights(tenant, tmp_path / "v2", parent=candidate, status=VersionStatus.TRAINING)
    retired = version_with_weights(tenant, tmp_path / "v3", parent=baseline, status=VersionStatus.RETIRED)
    theirs = version_with_weights(other_tenant, tmp_path / "theirs")
    for role in (Role.OPERATOR, Role.ADMIN):
        page = _console(member, role).get("/models/")
        assert page.status_code == 200
        assert _publish_buttons(page) == sorted([candidate.pk, retired.pk])
        assert f'data-confirm="Publish {MODEL} v1?' in page.content.decode()
        assert training.pk not in _publish_buttons(page)  # neither a version in training
        assert theirs.pk not in _publish_buttons(page)  # nor another tenant's
    for role in (Role.VIEWER, Role.ANNOTATOR):
        client = _console(member, role)
        page = client.get("/models/")
        assert page.status_code == 200
        assert _publish_buttons(page) == []
        assert "Publish" not in page.content.decode()
        assert client.post(f"/models/versions/{candidate.pk}/publish/").status_code == 403
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert not ServingEvent.objects.exists()


def test_publishing_from_the_console_loads_the_weights_and_serves_the_version(
    api_client, member, tenant, tmp_path
):
    base = version_with_weights(tenant, tmp_path / "v0")
    operator = _console(member, Role.OPERATOR)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        assert (
            api_client().post("/api/v1/routing/", {"version_id": base.pk}, format="json").status_code == 200
        )
        trained = version_with_weights(tenant, tmp_path / "v1", parent=base)
        response = operator.post(f"/models/versions/{trained.pk}/publish/", follow=True)
    assert response.redirect_chain == [("/models/", 302)]
    assert _messages(response) == [
        ("success", f"Published {MODEL}@1: loaded on slot-a; it now serves as production.")
    ]
    assert received == [("POST", "/admin/load")]
    base.refresh_from_db()
    trained.refresh_from_db()
    assert (base.status, trained.status) == (VersionStatus.RETIRED, VersionStatus.PRODUCTION)
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == trained
    assert RoutingState.objects.get(tenant=tenant).stable == trained
    assert "loaded on slot-a" in ServingEvent.objects.filter(tenant=tenant).last().reason
    assert _publish_buttons(response) == [base.pk]  # now retired: publishing it again goes back to it


def test_a_backend_that_refuses_the_weights_is_named_beside_the_success(member, tenant, tmp_path):
    candidate = version_with_weights(tenant, tmp_path / "v0")
    with scripted_http_server(LOADS) as (good_url, _), scripted_http_server(BROKEN) as (broken_url, _):
        BackendFactory(tenant=tenant, name="slot-a", base_url=good_url, served_model=MODEL, model_version="0")
        BackendFactory(
            tenant=tenant, name="slot-b", base_url=broken_url, served_model=MODEL, model_version="0"
        )
        response = _console(member, Role.OPERATOR).post(
            f"/models/versions/{candidate.pk}/publish/", follow=True
        )
    (success, warning) = _messages(response)
    assert success == ("success", f"Published {MODEL}@0: loaded on slot-a; it now serves as production.")
    assert warning[0] == "warning"
    assert warning[1].startswith("Not loaded on slot-b: ")
    assert warning[1].endswith("; those backends keep their weights.")
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.PRODUCTION


def test_a_refusal_is_shown_as_a_message_and_nothing_is_loaded(member, tenant):
    baseline, candidate = register_versions(tenant)
    release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    operator = _console(member, Role.OPERATOR)
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=tenant, base_url=url, served_model=MODEL, model_version="0")
        response = operator.post(f"/models/versions/{candidate.pk}/publish/", follow=True)
    assert response.redirect_chain == [("/models/", 302)]
    assert _messages(response) == [
        (
            "error",
            f"a release of {MODEL} is under way: it decides what serves until it ends (finish or abort it)",
        )
    ]
    assert received == []
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert not ServingEvent.objects.exists()


def test_a_version_that_cannot_serve_and_failed_loads_are_reported(member, tenant, tmp_path):
    operator = _console(member, Role.OPERATOR)
    training = version_with_weights(tenant, tmp_path / "v0", status=VersionStatus.TRAINING)
    refused = operator.post(f"/models/versions/{training.pk}/publish/", follow=True)
    assert _messages(refused) == [("error", f"{MODEL} v0 is training; it cannot serve by direct publication")]
    candidate = version_with_weights(tenant, tmp_path / "v1", parent=training)
    unserved = operator.post(f"/models/versions/{candidate.pk}/publish/", follow=True)
    assert [level for level, _ in _messages(unserved)] == ["warning"]
    assert f"No backend of this tenant serves {MODEL}" in _messages(unserved)[0][1]
    with scripted_http_server(BROKEN) as (url, received):
        BackendFactory(tenant=tenant, name="slot-a", base_url=url, served_model=MODEL, model_version="0")
        failed = operator.post(f"/models/versions/{candidate.pk}/publish/", follow=True)
    assert received == [("POST", "/admin/load")]
    ((level, text),) = _messages(failed)
    assert level == "error"
    assert text.startswith(f"{MODEL}@1 was loaded on no backend (slot-a: ")
    assert text.endswith("it stays candidate.")
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert not ServingEvent.objects.exists()


def test_another_tenants_version_is_not_found_and_untouched(member, tenant, other_tenant, tmp_path):
    theirs = version_with_weights(other_tenant, tmp_path / "theirs")
    with scripted_http_server(LOADS) as (url, received):
        BackendFactory(tenant=other_tenant, base_url=url, served_model=MODEL, model_version="0")
        response = _console(member, Role.ADMIN).post(f"/models/versions/{theirs.pk}/publish/")
    assert response.status_code == 404
    assert received == []
    assert ModelVersion.objects.get(pk=theirs.pk).status == VersionStatus.CANDIDATE
