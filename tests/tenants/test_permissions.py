"""The role × action matrix over the real endpoints: allowed requests succeed, denied ones get 403
and change nothing."""

import pytest

from apps.audit.models import AuditEvent
from apps.inference.models import InferenceBackend
from apps.tenants.models import ApiKey, Membership, TenantPolicy
from apps.tenants.permissions import PERMISSIONS, Action, Role, role_can
from tests.tenants.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def _snapshot(tenant):
    return (
        list(ApiKey.objects.filter(tenant=tenant).values_list("id", "revoked_at", "grace_until").order_by("id")),
        list(Membership.objects.filter(tenant=tenant).values_list("id", "role").order_by("id")),
        TenantPolicy.objects.filter(tenant=tenant).values_list("retention_days", flat=True).get(),
        AuditEvent.objects.filter(tenant=tenant).count(),
        InferenceBackend.objects.filter(tenant=tenant).count(),
    )


def _request(action, client, context):
    """One representative request per action."""
    tenant, victim_key, victim_member = context
    if action is Action.TENANT_VIEW:
        return client.get("/api/v1/tenants/")
    if action is Action.POLICY_VIEW:
        return client.get("/api/v1/policy/")
    if action is Action.POLICY_EDIT:
        return client.patch("/api/v1/policy/", {"retention_days": 11}, format="json")
    if action is Action.MEMBER_VIEW:
        return client.get("/api/v1/members/")
    if action is Action.MEMBER_MANAGE:
        return client.patch(f"/api/v1/members/{victim_member.pk}/", {"role": "operator"}, format="json")
    if action is Action.API_KEY_VIEW:
        return client.get("/api/v1/keys/")
    if action is Action.API_KEY_MANAGE:
        return client.post(f"/api/v1/keys/{victim_key.pk}/revoke/")
    if action is Action.AUDIT_VIEW:
        return client.get("/api/v1/audit/")
    if action is Action.BACKEND_VIEW:
        return client.get("/api/v1/backends/")
    if action is Action.BACKEND_MANAGE:
        return client.post("/api/v1/backends/", {"name": "b", "base_url": "http://127.0.0.1:1", "kind": "vllm",
                                                 "served_model": "m"}, format="json")
    raise AssertionError(f"no request for {action}")


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("action", list(Action))
def test_role_action_matrix(role, action, tenant, api_client, member):
    from apps.audit.services import Actor
    from apps.tenants.services import api_key_create

    MembershipFactory(tenant=tenant, role=Role.ADMIN)  # so the tenant never lacks an admin
    victim_key, _ = api_key_create(tenant=tenant, actor=Actor.system("test"), name="victim", scopes=["inference"])
    victim_member = MembershipFactory(tenant=tenant, role=Role.VIEWER)
    client = api_client(user=member(role))
    before = _snapshot(tenant)
    response = _request(action, client, (tenant, victim_key, victim_member))
    if role_can(role, action):
        assert response.status_code in {200, 201}, response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "role_forbidden"
        assert _snapshot(tenant) == before


def test_matrix_covers_every_action():
    assert set(PERMISSIONS) == set(Action)
    for roles, _scope in PERMISSIONS.values():
        assert Role.ADMIN in roles


@pytest.mark.parametrize("scopes,allowed", [(["admin"], True), (["inference"], False), (["rewards:write"], False)])
def test_key_scope_decides_admin_actions(scopes, allowed, api_client, tenant):
    client = api_client(scopes)
    before = _snapshot(tenant)
    response = client.patch("/api/v1/policy/", {"retention_days": 12}, format="json")
    if allowed:
        assert response.status_code == 200
        assert response.json()["retention_days"] == 12
    else:
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "scope_missing"
        assert "admin" in response.json()["error"]["message"]
        assert _snapshot(tenant) == before


def test_anonymous_gets_401(client, tenant):
    response = client.get("/api/v1/members/")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_user_without_membership_gets_404(api_client, tenant):
    response = api_client(user=UserFactory()).get("/api/v1/policy/")
    assert response.status_code == 404
