"""An address of the operator's network is granted to one tenant (apps/inference/grants.py): another tenant cannot
register it, through the REST API, the console form or a move of its own backend, and learns nothing of whose it
is; the operator grants with `manage.py backendgrant`. No test here connects anywhere."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from apps.audit.models import AuditEvent
from apps.inference.models import BackendAddressGrant, InferenceBackend
from tests.inference.factories import BackendFactory
from tests.network import EMBEDDED_ALLOWED_HOSTS, connections_recorded

pytestmark = pytest.mark.django_db

BODY = {"name": "replica", "kind": "embedded", "served_model": "policy-small"}
THEIR_SERVER = "http://127.0.0.1:8100"  # the other tenant's embedded server


@pytest.fixture
def grants_by_the_operator_only(settings):
    """The embedded default's allow-list, and no grant but those the tests make."""
    settings.AREAL_BACKEND_ALLOWED_HOSTS = list(EMBEDDED_ALLOWED_HOSTS)
    settings.AREAL_BACKEND_GRANTS = []
    return settings


@pytest.fixture
def their_server(other_tenant, grants_by_the_operator_only):
    call_command("backendgrant", other_tenant.slug, "127.0.0.1:8100", stdout=StringIO())
    return BackendFactory(tenant=other_tenant, name="embedded", base_url=THEIR_SERVER)


def assert_not_granted(response, *, other_tenant):
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "backend_address_not_granted"
    assert error["fields"] == {"base_url": ["not_granted"]}
    assert other_tenant.slug not in error["message"]
    assert "embedded" not in error["message"]  # nothing about the other tenant's backend


def test_rest_refuses_another_tenants_server_and_creates_nothing(
    api_client, tenant, other_tenant, their_server
):
    client = api_client(["admin"])
    with connections_recorded() as attempts:
        for url in (THEIR_SERVER, "http://localhost:8100", "http://127.0.0.1:8100/v1"):
            response = client.post("/api/v1/backends/", {**BODY, "base_url": url}, format="json")
            assert_not_granted(response, other_tenant=other_tenant)
    assert attempts == []
    assert not InferenceBackend.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(tenant=tenant, verb="backend.register").exists()


def test_an_ungranted_address_reads_like_another_tenants(api_client, tenant, other_tenant, their_server):
    """A free address nobody was granted is refused with the same words: the answer tells nothing of who uses what."""
    client = api_client(["admin"])
    theirs = client.post("/api/v1/backends/", {**BODY, "base_url": THEIR_SERVER}, format="json").json()
    free = client.post(
        "/api/v1/backends/", {**BODY, "base_url": "http://127.0.0.1:8101"}, format="json"
    ).json()
    assert theirs["error"]["message"].replace("8100", "PORT") == free["error"]["message"].replace(
        "8101", "PORT"
    )


def test_a_granted_address_is_registered(api_client, tenant, their_server):
    out = StringIO()
    call_command("backendgrant", tenant.slug, "127.0.0.1:8101", stdout=out)
    assert "granted 127.0.0.1:8101" in out.getvalue()
    response = api_client(["admin"]).post(
        "/api/v1/backends/", {**BODY, "base_url": "http://127.0.0.1:8101"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert InferenceBackend.objects.get(tenant=tenant).base_url == "http://127.0.0.1:8101"
    assert AuditEvent.objects.filter(tenant=tenant, verb="backend.grant").exists()


def test_a_grant_that_reaches_another_tenants_server_does_not_open_it(
    api_client, tenant, other_tenant, their_server, settings
):
    """An operator's too wide grant in the settings (every port; `backendgrant` refuses one that reaches another
    tenant's server) still leaves the other tenant's server theirs."""
    settings.AREAL_BACKEND_GRANTS = [f"{tenant.slug}=127.0.0.1:*"]
    client = api_client(["admin"])
    assert_not_granted(
        client.post("/api/v1/backends/", {**BODY, "base_url": THEIR_SERVER}, format="json"),
        other_tenant=other_tenant,
    )
    assert (
        client.post(
            "/api/v1/backends/", {**BODY, "base_url": "http://127.0.0.1:8101"}, format="json"
        ).status_code
        == 201
    )


def test_a_backend_cannot_move_to_another_tenants_server(api_client, tenant, other_tenant, their_server):
    call_command("backendgrant", tenant.slug, "127.0.0.1:8101", stdout=StringIO())
    ours = BackendFactory(tenant=tenant, base_url="http://127.0.0.1:8101")
    response = api_client(["admin"]).patch(
        f"/api/v1/backends/{ours.pk}/", {"base_url": THEIR_SERVER}, format="json"
    )
    assert_not_granted(response, other_tenant=other_tenant)
    ours.refresh_from_db()
    assert ours.base_url == "http://127.0.0.1:8101"


def test_the_console_form_refuses_another_tenants_server(admin_user, tenant, other_tenant, their_server):
    client = Client()
    client.force_login(admin_user)
    response = client.post("/backends/", {**BODY, "base_url": THEIR_SERVER, "weight": 1})
    assert response.status_code == 422
    assert "not granted to this tenant" in response.content.decode()
    assert other_tenant.slug not in response.content.decode()
    assert not InferenceBackend.objects.filter(tenant=tenant).exists()


def test_the_operator_cannot_grant_an_address_that_is_another_tenants(tenant, their_server):
    for pattern in ("127.0.0.1:8100", "127.0.0.1:*"):
        with pytest.raises(CommandError, match="already another tenant's"):
            call_command("backendgrant", tenant.slug, pattern, stdout=StringIO())
    assert not BackendAddressGrant.objects.filter(tenant=tenant).exists()
    with pytest.raises(CommandError, match="already another tenant's"):
        call_command(
            "registerbackend",
            tenant.slug,
            "--name",
            "theirs",
            "--url",
            THEIR_SERVER,
            "--kind",
            "embedded",
            "--model",
            "m",
            stdout=StringIO(),
        )
    assert not InferenceBackend.objects.filter(tenant=tenant).exists()


def test_backendgrant_lists_revokes_and_refuses_public(tenant, grants_by_the_operator_only):
    call_command("backendgrant", tenant.slug, "10.0.5.0/24:8000", stdout=StringIO())
    listed = StringIO()
    call_command("backendgrant", tenant.slug, stdout=listed)
    assert listed.getvalue().split() == ["10.0.5.0/24:8000"]
    call_command("backendgrant", tenant.slug, "10.0.5.0/24:8000", "--revoke", stdout=StringIO())
    assert not BackendAddressGrant.objects.filter(tenant=tenant).exists()
    assert AuditEvent.objects.filter(tenant=tenant, verb="backend.grant_revoke").exists()
    for pattern in ("public", "no-port", "host:eighty"):
        with pytest.raises(CommandError):
            call_command("backendgrant", tenant.slug, pattern, stdout=StringIO())


def test_registerbackend_grants_what_the_operator_registers(tenant, grants_by_the_operator_only, monkeypatch):
    """`up` and the demo register their embedded servers with registerbackend: that grants the address."""
    monkeypatch.setattr(  # no probe
        "apps.inference.management.commands.registerbackend.backend_check", lambda *, backend: backend
    )
    for _ in range(2):  # idempotent, as `up` runs it at every start
        call_command(
            "registerbackend",
            tenant.slug,
            "--name",
            "embedded",
            "--url",
            "http://127.0.0.1:8100",
            "--kind",
            "embedded",
            "--model",
            "default",
            stdout=StringIO(),
        )
    assert list(BackendAddressGrant.objects.filter(tenant=tenant).values_list("address", flat=True)) == [
        "127.0.0.1:8100"
    ]
    assert InferenceBackend.objects.filter(tenant=tenant, base_url="http://127.0.0.1:8100").count() == 1


def test_backendgrant_prints_the_servers_own_admin_token(tenant, grants_by_the_operator_only):
    from apps.inference.admin_tokens import inference_admin_token

    out = StringIO()
    call_command("backendgrant", tenant.slug, "127.0.0.1:8101", "--print-admin-token", stdout=out)
    token = out.getvalue().split()[-1]
    assert token == inference_admin_token("http://127.0.0.1:8101")
    assert token != inference_admin_token("http://127.0.0.1:8100")
    with pytest.raises(CommandError, match="one exact HOST:PORT"):
        call_command("backendgrant", tenant.slug, "127.0.0.1:*", "--print-admin-token", stdout=StringIO())
