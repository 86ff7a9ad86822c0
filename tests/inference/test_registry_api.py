import socket
from io import StringIO

import pytest
from django.core.management import call_command

from apps.audit.models import AuditEvent
from apps.inference.models import BackendState, InferenceBackend
from apps.tenants.permissions import Role
from tests.inference.factories import BackendFactory

pytestmark = pytest.mark.django_db


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


BODY = {
    "name": "replica-a",
    "base_url": "http://127.0.0.1:8100",
    "kind": "embedded",
    "served_model": "policy-small",
    "model_version": "1",
}


def test_register_list_update_remove_with_audit(api_client, tenant):
    client = api_client(["admin"])
    created = client.post("/api/v1/backends/", BODY, format="json")
    assert created.status_code == 201
    assert created.json()["state"] == "unknown"
    backend_id = created.json()["id"]
    assert client.post("/api/v1/backends/", BODY, format="json").status_code == 409
    assert [row["name"] for row in client.get("/api/v1/backends/").json()["results"]] == ["replica-a"]
    drained = client.patch(
        f"/api/v1/backends/{backend_id}/", {"state": "draining", "weight": 2}, format="json"
    )
    assert drained.json()["state"] == "draining"
    assert drained.json()["weight"] == 2
    assert client.delete(f"/api/v1/backends/{backend_id}/").status_code == 204
    verbs = list(
        AuditEvent.objects.filter(tenant=tenant, verb__startswith="backend.")
        .order_by("sequence")
        .values_list("verb", flat=True)
    )
    assert verbs == ["backend.register", "backend.update", "backend.remove"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "tgi"}, "kind"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"name": "has space"}, "name"),
        ({"weight": -1}, "weight"),
    ],
)
def test_bad_registrations_are_rejected(api_client, change, field):
    client = api_client(["admin"])
    response = client.post("/api/v1/backends/", {**BODY, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not InferenceBackend.objects.exists()


def test_other_tenants_backends_are_invisible(api_client, tenant, other_tenant):
    theirs = BackendFactory(tenant=other_tenant)
    BackendFactory(tenant=tenant, name="ours")
    client = api_client(["admin"])
    assert [row["name"] for row in client.get("/api/v1/backends/").json()["results"]] == ["ours"]
    for method, path in [("get", ""), ("patch", ""), ("delete", ""), ("post", "check/")]:
        response = getattr(client, method)(
            f"/api/v1/backends/{theirs.pk}/{path}", {"weight": 5}, format="json"
        )
        assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.weight == 1


@pytest.mark.parametrize(
    ("role", "allowed"), [(Role.OPERATOR, True), (Role.ANNOTATOR, False), (Role.VIEWER, False)]
)
def test_who_may_register(api_client, member, role, allowed):
    response = api_client(user=member(role)).post("/api/v1/backends/", BODY, format="json")
    assert response.status_code == (201 if allowed else 403)
    assert InferenceBackend.objects.exists() == allowed


def test_check_marks_an_unreachable_backend_down(api_client, tenant):
    backend = BackendFactory(tenant=tenant, base_url=closed_port_url(), state=BackendState.UP)
    response = api_client(["admin"]).post(f"/api/v1/backends/{backend.pk}/check/")
    assert response.json()["state"] == "down"
    assert (
        response.json()["last_error"] == "the backend did not answer its health check"
    )  # no transport detail


def test_registerbackend_command_is_idempotent(tenant):
    url = closed_port_url()
    out = StringIO()
    call_command(
        "registerbackend",
        "acme",
        "--name",
        "local",
        "--url",
        url,
        "--kind",
        "vllm",
        "--model",
        "m",
        stdout=out,
    )
    call_command(
        "registerbackend",
        "acme",
        "--name",
        "local",
        "--url",
        url,
        "--kind",
        "vllm",
        "--model",
        "m",
        "--model-version",
        "2",
        stdout=out,
    )
    backend = InferenceBackend.objects.get(tenant=tenant, name="local")
    assert backend.model_version == "2"
    assert backend.state == BackendState.DOWN
    assert "registered local" in out.getvalue()
    assert "updated local" in out.getvalue()
