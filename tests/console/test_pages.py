import pytest
from django.test import Client

from apps.tenants.models import ApiKey, TenantPolicy
from apps.tenants.permissions import Role
from tests.tenants.factories import PASSWORD, MembershipFactory

pytestmark = pytest.mark.django_db


def test_login_and_logout(admin_user, tenant):
    client = Client()
    assert client.get("/").status_code == 302
    response = client.post("/login/", {"username": admin_user.username, "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_repeated_wrong_passwords_are_throttled(admin_user, settings):
    client = Client()
    for _ in range(settings.AREAL_LOGIN_MAX_FAILURES):
        failed = client.post("/login/", {"username": admin_user.username, "password": "wrong"})
        assert failed.status_code == 200
        assert b"correct username and password" in failed.content
    refused = client.post("/login/", {"username": admin_user.username, "password": PASSWORD})
    assert refused.status_code == 429
    assert b"Too many failed sign-in attempts" in refused.content
    assert "_auth_user_id" not in client.session


def test_forms_are_csrf_protected(admin_user, tenant):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    response = client.post("/settings/keys/", {"name": "x", "scopes": ["inference"]})
    assert response.status_code == 403
    assert not ApiKey.objects.filter(name="x").exists()


@pytest.mark.parametrize(
    ("role", "visible", "hidden"),
    [
        (Role.ADMIN, ["Members", "API keys", "Policy", "Audit log"], []),
        (Role.OPERATOR, ["Members", "Policy", "Audit log"], ["API keys"]),
        (Role.ANNOTATOR, ["Annotation"], ["Policy", "Members", "API keys", "Audit log", "Releases"]),
        (Role.VIEWER, ["Members", "Policy"], ["API keys", "Audit log"]),
    ],
)
def test_navigation_follows_role(member, role, visible, hidden):
    client = Client()
    client.force_login(member(role))
    page = client.get("/").content.decode()
    for label in visible:
        assert f">{label}</a>" in page
    for label in hidden:
        assert f">{label}</a>" not in page


def test_admin_creates_rotates_and_revokes_a_key_in_the_console(admin_user, tenant):
    client = Client()
    client.force_login(admin_user)
    created = client.post("/settings/keys/", {"name": "agent", "scopes": ["inference", "rewards:write"]})
    raw = created.context["raw_key"]
    assert raw.encode() in created.content
    listing = client.get("/settings/keys/").content
    assert raw.encode() not in listing
    assert b"agent" in listing
    key = ApiKey.objects.get(tenant=tenant, name="agent")
    rotated = client.post(f"/settings/keys/{key.pk}/rotate/", {"grace_seconds": "3600"})
    assert rotated.status_code == 200
    assert rotated.context["rotated"]
    client.post(f"/settings/keys/{key.pk}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_operator_cannot_manage_keys_or_policy(member, tenant):
    client = Client()
    client.force_login(member(Role.OPERATOR))
    assert client.post("/settings/keys/", {"name": "sneaky", "scopes": ["admin"]}).status_code == 403
    assert (
        client.post(
            "/settings/policy/", {"consent_mode": "none", "retention_days": 1, "pii_mode": "off"}
        ).status_code
        == 403
    )
    assert not ApiKey.objects.filter(name="sneaky").exists()
    assert TenantPolicy.objects.get(tenant=tenant).consent_mode == "full"


def test_policy_form_saves(admin_user, tenant):
    client = Client()
    client.force_login(admin_user)
    response = client.post(
        "/settings/policy/",
        {
            "allowed_models": "policy-small, policy-large",
            "consent_mode": "metadata_only",
            "retention_days": 30,
            "pii_mode": "block",
            "price-0-model": "policy-small",
            "price-0-prompt_per_1k": "0.1",
            "price-0-completion_per_1k": "0.2",
            "price-1-model": "",
        },
    )
    assert response.status_code == 302
    policy = TenantPolicy.objects.get(tenant=tenant)
    assert policy.allowed_models == ["policy-small", "policy-large"]
    assert policy.retention_days == 30
    assert policy.price_table == {"policy-small": {"prompt_per_1k": 0.1, "completion_per_1k": 0.2}}


def test_tenant_switcher(admin_user, tenant, other_tenant):
    MembershipFactory(tenant=other_tenant, user=admin_user, role=Role.VIEWER)
    client = Client()
    client.force_login(admin_user)
    assert b"Acme</h1>" in client.get("/").content
    client.post("/tenant/switch/", {"tenant": "globex"})
    page = client.get("/").content
    assert b"Globex</h1>" in page
    assert b">API keys</a>" not in page
    client.post("/tenant/switch/", {"tenant": "nope"})
    assert b"Globex</h1>" in client.get("/").content


def test_audit_page_filters_and_paginates(admin_user, tenant):
    client = Client()
    client.force_login(admin_user)
    for number in range(3):
        client.post("/settings/keys/", {"name": f"k{number}", "scopes": ["inference"]})
    page = client.get("/audit/?verb=api_key.").content.decode()
    assert page.count("<code>api_key.create</code>") == 3
    assert client.get("/audit/?since=garbage").status_code == 200


def test_api_schema_and_docs_are_served_without_outside_assets(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/keys/{key_id}/rotate/" in schema.content
    docs = client.get("/api/docs/").content.decode()
    assert "cdn" not in docs.lower()
    assert "/static/drf_spectacular_sidecar/" in docs


def test_another_tenants_backend_is_a_404_page_like_a_missing_one(admin_user, tenant, other_tenant):
    from tests.inference.factories import BackendFactory

    theirs = BackendFactory(tenant=other_tenant, name="theirs")
    client = Client()
    client.force_login(admin_user)
    foreign = client.post(f"/backends/{theirs.pk}/check/")
    missing = client.post("/backends/999999/check/")
    assert foreign.status_code == missing.status_code == 404
    theirs.refresh_from_db()
    assert theirs.last_checked_at is None


def test_production_api_schema_and_docs_need_a_signed_in_person_or_a_key(
    client, admin_user, api_client, settings
):
    settings.AREAL_API_DOCS_PUBLIC = False
    assert client.get("/api/schema/").status_code in {401, 403}
    assert client.get("/api/docs/").status_code in {401, 403}
    assert api_client(["inference"]).get("/api/schema/").status_code == 200
    client.force_login(admin_user)
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


# Pages that render data a user can name (issue 26, finding 9): Django's templates look `items` up as a key
# before the method, so `data.items` of a dict with an `items` key rendered that value and the page failed.


def _signed_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", [Role.ADMIN, Role.OPERATOR])
def test_the_overview_and_the_audit_log_show_an_annotation_queues_event(member, tenant, role):
    from apps.annotation.services import annotation_queue_create
    from tests.rewards.factories import SYSTEM, make_spec

    annotator = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="support",
        spec_id=make_spec(tenant).pk,
        filters={},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
    )
    client = _signed_in(member(role))
    for path in ("/", "/audit/"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        page = response.content.decode()
        assert "<code>annotation_queue.create</code>" in page, path
        assert "<b>items</b>: 0" in page, path  # the event's own `items` key, shown as data
        assert f"<b>assignees</b>: [{annotator.pk}]" in page, path
    assert queue.pk


def test_event_data_with_the_names_of_dict_methods_renders_as_data(admin_user, tenant):
    from django.db import transaction

    from apps.audit.services import audit_record
    from tests.rewards.factories import SYSTEM

    data = {"items": "it-1", "values": "va-2", "keys": "ke-3", "get": "ge-4", "copy": {"items": 5}}
    with transaction.atomic():
        audit_record(tenant=tenant, actor=SYSTEM, verb="probe.names", data=data)
    client = _signed_in(admin_user)
    for path in ("/", "/audit/?verb=probe."):
        response = client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        for key in ("items", "values", "keys", "get"):
            assert f"<b>{key}</b>: {data[key]}" in page, (path, key)
        assert "<b>copy</b>: {&#x27;items&#x27;: 5}" in page, path


def test_a_reward_label_named_like_a_dict_method_renders_on_the_specs_page(admin_user, tenant):
    from tests.rewards.factories import make_spec

    make_spec(
        tenant,
        name="verdict",
        kind="categorical",
        minimum=None,
        maximum=None,
        categories={"items": 1.0, "values": 0.0, "keys": 0.5},
    )
    response = _signed_in(admin_user).get("/reward-specs/")
    assert response.status_code == 200
    page = response.content.decode()
    for label, value in (("items", "1.0"), ("values", "0.0"), ("keys", "0.5")):
        assert f"<code>{label}={value}</code>" in page


def test_no_template_iterates_a_dict_through_its_items_method():
    """`{% for key, value in data.items %}` reads a key named `items` first; templates use `data|pairs`. The two
    figure dicts keep `.items`: their keys are the product's own metric and signal names, never a user's."""
    import re
    from pathlib import Path

    from django.conf import settings

    allowed = {("release_detail.html", "figures"), ("evolution_policy.html", "figures")}
    loop = re.compile(r"{%\s*for\s[^%]*\sin\s+([\w.]+)\.(items|values|keys)\s*%}")
    found = []
    for directory in settings.TEMPLATES[0]["DIRS"]:
        for path in Path(directory).rglob("*.html"):
            found.extend(
                f"{path.name}: {match.group(0)}"
                for match in loop.finditer(path.read_text())
                if (path.name, match.group(1)) not in allowed
            )
    assert found == []
