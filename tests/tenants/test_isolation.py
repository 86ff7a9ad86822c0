"""Every list and detail endpoint, with a second tenant's rows planted: they never show, and another
tenant's object answers exactly like a missing one (404)."""

import pytest

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.tenants.models import ApiKey, Membership
from apps.tenants.permissions import Role
from apps.tenants.services import api_key_create, policy_update
from tests.tenants.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def planted(other_tenant):
    """Rows of the other tenant: a member, a key, a policy change (and so audit events)."""
    membership = MembershipFactory(tenant=other_tenant, role=Role.ADMIN)
    key, _ = api_key_create(tenant=other_tenant, actor=Actor.system("test"), name="theirs", scopes=["admin"])
    policy_update(tenant=other_tenant, actor=Actor.system("test"), changes={"retention_days": 7})
    return {"membership": membership, "key": key}


@pytest.fixture(params=["key", "session"])
def client(request, api_client, admin_user):
    return api_client(["admin"]) if request.param == "key" else api_client(user=admin_user)


def test_lists_show_only_own_tenant(client, planted, tenant, other_tenant):
    policy_update(tenant=tenant, actor=Actor.system("test"), changes={"rate_limit_rpm": 5})
    members = client.get("/api/v1/members/").json()["results"]
    assert planted["membership"].user.username not in {row["username"] for row in members}
    keys = client.get("/api/v1/keys/").json()["results"]
    assert "theirs" not in {row["name"] for row in keys}
    assert not ApiKey.objects.filter(tenant=tenant, name="theirs").exists()
    events = client.get("/api/v1/audit/?page_size=200").json()["results"]
    own_hashes = set(AuditEvent.objects.filter(tenant=tenant).values_list("hash", flat=True))
    assert events
    assert {row["hash"] for row in events} == own_hashes
    assert client.get("/api/v1/policy/").json()["retention_days"] == 90
    tenants = client.get("/api/v1/tenants/").json()["results"]
    assert [row["slug"] for row in tenants] == ["acme"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/members/{membership}/"),
        ("patch", "/api/v1/members/{membership}/"),
        ("delete", "/api/v1/members/{membership}/"),
        ("get", "/api/v1/keys/{key}/"),
        ("post", "/api/v1/keys/{key}/revoke/"),
        ("post", "/api/v1/keys/{key}/rotate/"),
    ],
)
def test_other_tenants_objects_are_not_found(client, planted, method, path):
    url = path.format(membership=planted["membership"].pk, key=planted["key"].pk)
    response = getattr(client, method)(url, {"role": "viewer"}, format="json")
    assert response.status_code == 404
    missing = getattr(client, method)(
        path.format(membership=999999, key=999999), {"role": "viewer"}, format="json"
    )
    assert missing.status_code == 404
    assert response.json()["error"]["code"] == missing.json()["error"]["code"]
    planted["key"].refresh_from_db()
    assert planted["key"].revoked_at is None
    assert planted["key"].replaced_by is None
    assert Membership.objects.get(pk=planted["membership"].pk).role == Role.ADMIN


def test_session_user_cannot_select_a_tenant_they_do_not_belong_to(api_client, admin_user, planted):
    client = api_client(user=admin_user)
    response = client.get("/api/v1/members/", HTTP_X_TENANT="globex")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tenant_not_found"


def test_key_list_query_count_does_not_grow_with_rows(api_client, tenant, django_assert_max_num_queries):
    client = api_client(["admin"])
    for number in range(30):
        api_key_create(tenant=tenant, actor=Actor.system("test"), name=f"k{number}", scopes=["inference"])
    assert client.get("/api/v1/keys/").status_code == 200  # warms the key cache and last-used stamp
    with django_assert_max_num_queries(3):  # tenant, count, one page
        response = client.get("/api/v1/keys/")
    assert response.status_code == 200
    assert response.json()["count"] == 31
