"""The two-person rule over REST compares people, not principals: a person who started a release with their
session cannot approve it with an API key they created (nor with a key that key created, nor a rotation of
it), an approval that names no person is refused, and another person approves."""

import pytest
from rest_framework.test import APIClient

from apps.releases.models import Release, ReleaseStatus
from apps.tenants.permissions import Role
from apps.tenants.services import api_key_create
from tests.releases.helpers import SYSTEM, release_at

pytestmark = pytest.mark.django_db


def _with_key(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _new_key(client: APIClient, name: str) -> str:
    created = client.post("/api/v1/keys/", {"name": name, "scopes": ["admin"]}, format="json")
    assert created.status_code == 201, created.content
    return created.json()["key"]


def test_a_person_cannot_approve_their_own_release_with_their_own_keys(api_client, member, tenant):
    tenant.policy.two_person_promotion = True
    tenant.policy.save()
    alice, bob = member(Role.ADMIN), member(Role.ADMIN)
    alice_session = api_client(user=alice)
    release = release_at(tenant, ReleaseStatus.DRAFT, served=True)
    started = alice_session.post(f"/api/v1/releases/{release.pk}/start/", {}, format="json")
    assert started.status_code == 200, started.content
    Release.objects.filter(pk=release.pk).update(status=ReleaseStatus.AWAITING_APPROVAL, stage_index=3)

    alice_key = _new_key(alice_session, "alice-ci")
    key_of_her_key = _new_key(_with_key(alice_key), "alice-ci-child")
    key_id = next(
        row["id"] for row in alice_session.get("/api/v1/keys/").json()["results"] if row["name"] == "alice-ci"
    )
    rotated = _with_key(alice_key).post(
        f"/api/v1/keys/{key_id}/rotate/", {"grace_seconds": 60}, format="json"
    )
    assert rotated.status_code == 201, rotated.content
    _, nobodys_key = api_key_create(tenant=tenant, actor=SYSTEM, name="from-the-cli", scopes=["admin"])
    for raw in (alice_key, key_of_her_key, rotated.json()["key"], nobodys_key):
        refused = _with_key(raw).post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
        assert refused.status_code == 403, refused.content
        assert refused.json()["error"]["code"] == "two_person_rule"
    assert alice_session.post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json").status_code == 403
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL

    bob_key = _new_key(api_client(user=bob), "bob-ci")
    approved = _with_key(bob_key).post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED


def test_a_release_started_with_a_key_is_the_key_creators(api_client, member, tenant):
    tenant.policy.two_person_promotion = True
    tenant.policy.save()
    alice, bob = member(Role.ADMIN), member(Role.OPERATOR)
    alice_session = api_client(user=alice)
    alice_key = _with_key(_new_key(alice_session, "alice-deploy"))
    release = release_at(tenant, ReleaseStatus.DRAFT, served=True)
    assert alice_key.post(f"/api/v1/releases/{release.pk}/start/", {}, format="json").status_code == 200
    Release.objects.filter(pk=release.pk).update(status=ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    refused = alice_session.post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "two_person_rule"
    approved = api_client(user=bob).post(f"/api/v1/releases/{release.pk}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
