from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.tenants.authentication import api_key_authenticate
from apps.tenants.keys import key_hash
from apps.tenants.models import ApiKey, Tenant

pytestmark = pytest.mark.django_db


def _use(raw):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/v1/tenants/")


def test_created_key_is_shown_once_and_stored_only_as_hash(api_client, tenant):
    response = api_client(["admin"]).post(
        "/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json"
    )
    assert response.status_code == 201
    raw = response.json()["key"]
    stored = ApiKey.objects.get(tenant=tenant, name="agent")
    assert stored.hashed_secret == key_hash(raw)
    assert raw not in (stored.hashed_secret, stored.prefix)
    assert raw.startswith(stored.prefix)
    detail = api_client(["admin"]).get(f"/api/v1/keys/{stored.pk}/").json()
    assert "key" not in detail
    assert detail["prefix"] == stored.prefix
    assert AuditEvent.objects.filter(tenant=tenant, verb="api_key.create", target_id=str(stored.pk)).exists()


def test_x_api_key_header_works_too(api_client, tenant):
    raw = api_client(["inference"]).raw_key
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/tenants/", HTTP_X_API_KEY=raw).status_code == 200


def test_revoked_key_is_refused_with_a_clear_message(api_client, tenant):
    admin = api_client(["admin"])
    created = admin.post("/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json").json()
    assert _use(created["key"]).status_code == 200  # cached now
    assert admin.post(f"/api/v1/keys/{created['id']}/revoke/").status_code == 200
    response = _use(created["key"])
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]
    assert response.json()["error"]["code"] == "key_revoked"
    again = admin.post(f"/api/v1/keys/{created['id']}/revoke/")
    assert again.status_code == 409


def test_expired_key_is_refused(api_client, tenant):
    created = (
        api_client(["admin"])
        .post(
            "/api/v1/keys/", {"name": "short", "scopes": ["inference"], "expires_in_days": 1}, format="json"
        )
        .json()
    )
    ApiKey.objects.filter(pk=created["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _use(created["key"])
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "key_expired"
    assert "expired at" in response.json()["error"]["message"]


def test_rotation_keeps_old_key_for_the_grace_period_then_refuses_it(api_client, tenant):
    admin = api_client(["admin"])
    old = admin.post("/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json").json()
    rotated = admin.post(f"/api/v1/keys/{old['id']}/rotate/", {"grace_seconds": 600}, format="json")
    assert rotated.status_code == 201
    new = rotated.json()
    assert new["scopes"] == ["inference"]
    assert new["key"] != old["key"]
    assert _use(old["key"]).status_code == 200, "old key valid during grace"
    assert _use(new["key"]).status_code == 200
    assert admin.get(f"/api/v1/keys/{old['id']}/").json()["status"] == "rotating"
    # The grace period ends: the cached entry carries grace_until, so no eviction is needed.
    ApiKey.objects.filter(pk=old["id"]).update(grace_until=timezone.now() - timedelta(seconds=1))
    from tests.conftest import clear_cache

    clear_cache()
    response = _use(old["key"])
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "key_rotated"
    assert "replacement" in response.json()["error"]["message"]
    assert _use(new["key"]).status_code == 200


def test_rotation_with_zero_grace_ends_old_key_at_once(api_client):
    admin = api_client(["admin"])
    old = admin.post("/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json").json()
    assert _use(old["key"]).status_code == 200
    admin.post(f"/api/v1/keys/{old['id']}/rotate/", {"grace_seconds": 0}, format="json")
    assert _use(old["key"]).status_code == 401


def test_unknown_key_is_401(db):
    response = _use("ak-not-a-real-key")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_key"


def test_cached_authentication_costs_no_query(api_client, django_assert_num_queries):
    raw = api_client(["inference"]).raw_key
    principal = api_key_authenticate(raw)
    with django_assert_num_queries(0):
        again = api_key_authenticate(raw)
    assert again == principal


def test_last_used_is_recorded(api_client, tenant):
    client = api_client(["inference"])
    client.get("/api/v1/tenants/")
    assert ApiKey.objects.get(prefix=client.raw_key[:12]).last_used_at is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scopes": ["inference"]}, "name"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": ["root"]}, "scopes"),
        ({"name": "x", "scopes": ["inference"], "expires_in_days": 0}, "expires_in_days"),
        ({"name": "x", "scopes": "inference"}, "scopes"),
    ],
)
def test_malformed_key_bodies_get_field_errors(api_client, tenant, body, field):
    client = api_client(["admin"])
    before = ApiKey.objects.count()
    response = client.post("/api/v1/keys/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert ApiKey.objects.count() == before


def test_non_json_body_is_400(api_client):
    response = api_client(["admin"]).generic(
        "POST", "/api/v1/keys/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_duplicate_key_name_is_409(api_client):
    admin = api_client(["admin"])
    admin.post("/api/v1/keys/", {"name": "dup", "scopes": ["inference"]}, format="json")
    response = admin.post("/api/v1/keys/", {"name": "dup", "scopes": ["inference"]}, format="json")
    assert response.status_code == 409


def test_createapikey_prints_the_key_alone_on_its_last_line(tenant):
    out = StringIO()
    call_command(
        "createapikey",
        "acme",
        "--scope",
        "inference",
        "--scope",
        "rewards:write",
        "--name",
        "cli",
        "--expires-days",
        "30",
        stdout=out,
        stderr=StringIO(),
    )
    raw = out.getvalue().strip().splitlines()[-1]
    principal = api_key_authenticate(raw)
    assert principal.tenant_slug == "acme"
    assert set(principal.scopes) == {"inference", "rewards:write"}
    assert principal.expires_at is not None


def test_createtenant_is_idempotent(db):
    call_command("createtenant", "initech", "--name", "Initech", stdout=StringIO())
    call_command("createtenant", "initech", "--name", "Other name", stdout=StringIO())
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.name == "Initech"
    assert tenant.policy.consent_mode == "full"
    assert AuditEvent.objects.filter(tenant=tenant, verb="tenant.create").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_verification_racing_the_revocation_cannot_cache_the_key_as_valid(api_client, monkeypatch):
    """A verification that read the row before the revocation committed, and caches it after the revocation's
    eviction, must not keep the key alive until the cache entry expires."""
    import threading

    from apps.tenants import authentication

    admin = api_client(["admin"])
    created = admin.post("/api/v1/keys/", {"name": "agent", "scopes": ["inference"]}, format="json").json()
    read, revoked = threading.Event(), threading.Event()
    load = authentication._load

    def load_then_wait(hashed):
        principal = load(hashed)  # the row as it was before the revocation
        read.set()
        revoked.wait(timeout=30)
        return principal

    monkeypatch.setattr(authentication, "_load", load_then_wait)
    racer = threading.Thread(target=lambda: authentication.api_key_authenticate(created["key"]))
    racer.start()
    assert read.wait(timeout=30)
    monkeypatch.setattr(authentication, "_load", load)
    assert admin.post(f"/api/v1/keys/{created['id']}/revoke/").status_code == 200
    revoked.set()
    racer.join(timeout=30)  # it has cached what it read, after the eviction
    response = _use(created["key"])
    assert (response.status_code, response.json()["error"]["code"]) == (401, "key_revoked")
