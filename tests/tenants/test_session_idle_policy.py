"""The tenant policy's session idle timeout, edited through the policy API and the console form."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.models import MAX_SESSION_IDLE_SECONDS, TenantPolicy

pytestmark = pytest.mark.django_db


def _timeout(tenant) -> int:
    return TenantPolicy.objects.get(tenant=tenant).session_idle_seconds


def test_the_default_is_ten_minutes_and_the_api_changes_it(api_client, tenant, other_tenant):
    client = api_client(["admin"])
    assert client.get("/api/v1/policy/").json()["session_idle_seconds"] == 600

    response = client.patch("/api/v1/policy/", {"session_idle_seconds": 0}, format="json")

    assert response.status_code == 200
    assert response.json()["session_idle_seconds"] == 0
    assert _timeout(tenant) == 0
    assert _timeout(other_tenant) == 600
    event = AuditEvent.objects.get(tenant=tenant, verb="policy.update")
    assert event.data == {"session_idle_seconds": {"old": 600, "new": 0}}


@pytest.mark.parametrize("value", [-1, MAX_SESSION_IDLE_SECONDS + 1, "soon"])
def test_a_bad_timeout_is_refused_with_its_field(api_client, tenant, value):
    response = api_client(["admin"]).patch(
        "/api/v1/policy/", {"session_idle_seconds": value, "retention_days": 7}, format="json"
    )

    assert response.status_code == 400
    assert "session_idle_seconds" in response.json()["error"]["fields"]
    policy = TenantPolicy.objects.get(tenant=tenant)
    assert (policy.session_idle_seconds, policy.retention_days) == (600, 90)


def _form(**changes) -> dict:
    return {"consent_mode": "full", "retention_days": 90, "pii_mode": "redact", **changes}


def test_the_console_form_sets_the_timeout_and_keeps_it_when_left_empty(admin_user, tenant):
    client = Client()
    client.force_login(admin_user)
    assert b"Session idle timeout" in client.get("/settings/policy/").content

    assert client.post("/settings/policy/", _form(session_idle_seconds=120)).status_code == 302
    assert _timeout(tenant) == 120
    assert client.post("/settings/policy/", _form(session_idle_seconds="")).status_code == 302
    assert _timeout(tenant) == 120

    refused = client.post("/settings/policy/", _form(session_idle_seconds=-5))
    assert refused.status_code == 400  # the form again, with its field error
    assert "session_idle_seconds" in refused.context["form"].errors
    assert _timeout(tenant) == 120
