import pytest

from apps.audit.models import AuditEvent
from apps.tenants.models import Membership, TenantPolicy
from apps.tenants.permissions import Role
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_policy_update_is_audited_with_old_and_new_values(api_client, tenant):
    body = {
        "allowed_models": ["policy-small"],
        "rate_limit_rpm": 60,
        "monthly_budget_usd": "12.50",
        "consent_mode": "metadata_only",
        "pii_mode": "block",
        "review_required": True,
        "price_table": {"policy-small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.3}},
    }
    response = api_client(["admin"]).patch("/api/v1/policy/", body, format="json")
    assert response.status_code == 200, response.content
    policy = TenantPolicy.objects.get(tenant=tenant)
    assert policy.allowed_models == ["policy-small"]
    assert policy.pii_mode == "block"
    assert policy.review_required
    event = AuditEvent.objects.get(tenant=tenant, verb="policy.update")
    assert event.data["consent_mode"] == {"old": "full", "new": "metadata_only"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"consent_mode": "everything"}, "consent_mode"),
        ({"retention_days": -1}, "retention_days"),
        ({"rate_limit_rpm": "fast"}, "rate_limit_rpm"),
        ({"price_table": {"m": {"prompt_per_1k": -1, "completion_per_1k": 1}}}, "price_table"),
        ({"price_table": {"m": {"prompt_per_1k": 1}}}, "price_table"),
    ],
)
def test_bad_policy_is_rejected_and_nothing_changes(api_client, tenant, body, field):
    response = api_client(["admin"]).patch("/api/v1/policy/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert TenantPolicy.objects.get(tenant=tenant).retention_days == 90
    assert not AuditEvent.objects.filter(tenant=tenant, verb="policy.update").exists()


def test_member_lifecycle_is_audited(api_client, tenant, admin_user):
    client = api_client(user=admin_user)
    newcomer = UserFactory(username="newcomer", email="new@example.test")
    added = client.post("/api/v1/members/", {"user": "new@example.test", "role": "annotator"}, format="json")
    assert added.status_code == 201
    assert added.json()["role"] == "annotator"
    membership_id = added.json()["id"]
    assert (
        client.post("/api/v1/members/", {"user": "newcomer", "role": "viewer"}, format="json").status_code
        == 409
    )
    assert (
        client.patch(f"/api/v1/members/{membership_id}/", {"role": "operator"}, format="json").json()["role"]
        == "operator"
    )
    assert client.delete(f"/api/v1/members/{membership_id}/").status_code == 204
    assert not Membership.objects.filter(user=newcomer).exists()
    verbs = list(
        AuditEvent.objects.filter(tenant=tenant, verb__startswith="member.")
        .order_by("sequence")
        .values_list("verb", flat=True)
    )
    assert verbs == ["member.add", "member.role_change", "member.remove"]


def test_unknown_user_is_404_and_bad_role_is_400(api_client):
    client = api_client(["admin"])
    assert (
        client.post("/api/v1/members/", {"user": "ghost", "role": "viewer"}, format="json").status_code == 404
    )
    response = client.post("/api/v1/members/", {"user": "ghost", "role": "emperor"}, format="json")
    assert response.status_code == 400
    assert "role" in response.json()["error"]["fields"]


def test_last_admin_cannot_be_demoted_or_removed(api_client, tenant, admin_user):
    client = api_client(user=admin_user)
    membership = Membership.objects.get(tenant=tenant, user=admin_user)
    response = client.patch(f"/api/v1/members/{membership.pk}/", {"role": "viewer"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "last_admin"
    assert client.delete(f"/api/v1/members/{membership.pk}/").status_code == 409
    assert Membership.objects.get(pk=membership.pk).role == Role.ADMIN
