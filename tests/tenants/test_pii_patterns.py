"""Tenant PII patterns are validated when saved, by the sanitizer's own validation (the one the gateway
compiles them with): a pattern the gateway would refuse is never stored, through REST or the console."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.tenants.models import TenantPolicy

pytestmark = pytest.mark.django_db

GOOD = [{"name": "order", "regex": r"ORD-\d{5}"}]


@pytest.mark.parametrize(
    ("patterns", "reason"),
    [
        ([{"name": "maybe", "regex": "x?"}], "empty string"),  # valid `re`, but matches everywhere
        ([{"name": "broken", "regex": "(unclosed"}], "missing )"),
        ([{"name": "bad name!", "regex": "x"}], "name"),
        ([{"name": "huge", "regex": "x" * 1001}], "longer than"),
        ([{"name": "t", "regex": "T[0-9]+"}, {"name": "t", "regex": "X[0-9]+"}], "duplicate"),
        ([{"name": "order", "regex": r"ORD-\d{5}", "flags": "i"}], "name"),
    ],
)
def test_a_pattern_the_gateway_would_refuse_is_refused_with_400_and_nothing_is_saved(
    api_client, tenant, patterns, reason
):
    client = api_client(["admin"])
    assert client.patch("/api/v1/policy/", {"pii_patterns": GOOD}, format="json").status_code == 200

    response = client.patch("/api/v1/policy/", {"pii_patterns": patterns, "retention_days": 7}, format="json")

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_pii_pattern"
    assert reason in " ".join(error["fields"]["pii_patterns"])
    policy = TenantPolicy.objects.get(tenant=tenant)
    assert policy.pii_patterns == GOOD
    assert policy.retention_days == 90
    assert AuditEvent.objects.filter(tenant=tenant, verb="policy.update").count() == 1


def test_valid_patterns_are_saved(api_client, tenant):
    response = api_client(["admin"]).patch("/api/v1/policy/", {"pii_patterns": GOOD}, format="json")

    assert response.status_code == 200
    assert response.json()["pii_patterns"] == GOOD
    assert TenantPolicy.objects.get(tenant=tenant).pii_patterns == GOOD


def test_the_console_shows_a_bad_pattern_as_a_form_error_and_saves_nothing(admin_user, tenant):
    client = Client()
    client.force_login(admin_user)

    response = client.post(
        "/settings/policy/",
        {
            "consent_mode": "full",
            "retention_days": 30,
            "pii_mode": "redact",
            "pattern-0-name": "maybe",
            "pattern-0-regex": "x?",
        },
    )

    assert response.status_code == 400
    assert "matches the empty string" in " ".join(response.context["form"].errors["pattern-0-regex"])
    policy = TenantPolicy.objects.get(tenant=tenant)
    assert policy.pii_patterns == []
    assert policy.retention_days == 90
