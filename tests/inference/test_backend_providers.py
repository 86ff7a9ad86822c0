"""A backend's credential (encrypted, write-only, admins only) and capability flags, through the REST API, the
console and `registerbackend`: validation, defaults per kind, audit without the secret, tenancy."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from apps.audit.models import AuditEvent
from apps.inference.credentials import credential_decrypt, credential_encrypt, credential_headers
from apps.inference.models import InferenceBackend
from apps.tenants.permissions import Role
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)
from tests.inference.factories import BackendFactory

pytestmark = pytest.mark.django_db

SECRET = "sk-provider-secret-1234abcd"
BODY = {
    "name": "hosted",
    "base_url": "http://127.0.0.1:9",
    "kind": "openai_compatible",
    "served_model": "teacher",
}
FLAGS = ("returns_token_ids", "returns_logprobs", "returns_token_versions", "accepts_return_token_ids")


def audit_dump(tenant) -> str:
    return json.dumps(list(AuditEvent.objects.filter(tenant=tenant).values("verb", "data")), default=str)


def test_a_credential_is_write_only_and_stored_encrypted(api_client, tenant):
    client = api_client(["admin"])
    created = client.post("/api/v1/backends/", {**BODY, "credential": SECRET}, format="json")
    assert created.status_code == 201
    shown = created.json()
    assert shown["credential_set"] is True
    assert shown["credential_last4"] == "abcd"
    assert "credential" not in shown
    detail = client.get(f"/api/v1/backends/{shown['id']}/").content.decode()
    listed = client.get("/api/v1/backends/").content.decode()
    stored = InferenceBackend.objects.get(pk=shown["id"])
    assert SECRET not in stored.credential_encrypted
    assert credential_decrypt(stored.credential_encrypted) == SECRET
    assert credential_headers(stored) == {"Authorization": f"Bearer {SECRET}"}
    for text in (created.content.decode(), detail, listed, audit_dump(tenant), repr(stored), str(stored)):
        assert SECRET not in text
    register = AuditEvent.objects.get(tenant=tenant, verb="backend.register")
    assert register.data["credential_set"] is True


def test_an_anthropic_credential_goes_as_x_api_key(api_client, tenant):
    client = api_client(["admin"])
    created = client.post(
        "/api/v1/backends/", {**BODY, "kind": "anthropic", "credential": SECRET}, format="json"
    ).json()
    headers = credential_headers(InferenceBackend.objects.get(pk=created["id"]))
    assert headers == {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
    assert not any(created[flag] for flag in FLAGS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"credential": "short"}, "credential"),
        ({"credential": "sk-has a space-123456"}, "credential"),
        ({"credential": "sk-line\r\nX-Injected: 1"}, "credential"),
        ({"kind": "anthropic", "returns_token_ids": True}, "returns_token_ids"),
        ({"returns_logprobs": "sometimes"}, "returns_logprobs"),
        ({"cap_parameter": "max_new_tokens"}, "cap_parameter"),
        ({"kind": "anthropic", "cap_parameter": "max_completion_tokens"}, "cap_parameter"),
    ],
)
def test_bad_provider_settings_are_refused_and_nothing_is_stored(api_client, tenant, change, field):
    response = api_client(["admin"]).post("/api/v1/backends/", {**BODY, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert "\r\n" not in response.content.decode()
    assert not InferenceBackend.objects.exists()
    assert not AuditEvent.objects.filter(tenant=tenant, verb__startswith="backend.").exists()


def test_flags_default_by_kind_and_a_kind_change_resets_those_not_given(api_client, tenant):
    client = api_client(["admin"])
    created = client.post(
        "/api/v1/backends/", {**BODY, "returns_token_versions": False}, format="json"
    ).json()
    assert [created[flag] for flag in FLAGS] == [True, True, False, True]
    path = f"/api/v1/backends/{created['id']}/"
    kept = client.patch(path, {"weight": 3}, format="json").json()
    assert kept["returns_token_versions"] is False
    anthropic = client.patch(path, {"kind": "anthropic"}, format="json").json()
    assert not any(anthropic[flag] for flag in FLAGS)
    refused = client.patch(path, {"accepts_return_token_ids": True}, format="json")
    assert refused.status_code == 400
    back = client.patch(path, {"kind": "vllm", "returns_logprobs": False}, format="json").json()
    assert [back[flag] for flag in FLAGS] == [True, False, True, True]


def test_the_cap_field_defaults_by_kind_is_kept_and_resets_with_a_kind_change(api_client, tenant):
    client = api_client(["admin"])
    hosted = client.post("/api/v1/backends/", BODY, format="json").json()
    assert hosted["cap_parameter"] == "max_completion_tokens"
    for kind in ("embedded", "vllm", "anthropic"):
        other = client.post("/api/v1/backends/", {**BODY, "name": kind, "kind": kind}, format="json").json()
        assert other["cap_parameter"] == "max_tokens", kind
    path = f"/api/v1/backends/{hosted['id']}/"
    assert client.patch(path, {"cap_parameter": "max_tokens"}, format="json").json()["cap_parameter"] == (
        "max_tokens"
    )
    assert client.patch(path, {"weight": 2}, format="json").json()["cap_parameter"] == "max_tokens"
    update = AuditEvent.objects.filter(tenant=tenant, verb="backend.update").order_by("sequence").first()
    assert update.data == {"cap_parameter": {"old": "max_completion_tokens", "new": "max_tokens"}}
    refused = client.patch(
        path, {"kind": "anthropic", "cap_parameter": "max_completion_tokens"}, format="json"
    )
    assert refused.status_code == 400
    assert InferenceBackend.objects.get(pk=hosted["id"]).kind == "openai_compatible"
    moved = client.patch(path, {"kind": "vllm"}, format="json").json()
    assert moved["cap_parameter"] == "max_tokens"
    back = client.patch(path, {"kind": "openai_compatible"}, format="json").json()
    assert back["cap_parameter"] == "max_completion_tokens"


def test_only_an_admin_sets_a_credential_or_moves_a_credentialed_backend(api_client, tenant, member):
    operator = api_client(user=member(Role.OPERATOR))
    admin = api_client(user=member(Role.ADMIN))
    refused = operator.post("/api/v1/backends/", {**BODY, "credential": SECRET}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "role_forbidden"
    assert not InferenceBackend.objects.exists()
    created = admin.post("/api/v1/backends/", {**BODY, "credential": SECRET}, format="json").json()
    path = f"/api/v1/backends/{created['id']}/"
    for change in (
        {"base_url": "http://127.0.0.1:10"},
        {"credential": None},
        {"credential": "sk-other-9999"},
    ):
        response = operator.patch(path, change, format="json")
        assert response.status_code == 403, change
    assert operator.patch(path, {"weight": 2, "returns_logprobs": False}, format="json").status_code == 200
    backend = InferenceBackend.objects.get(pk=created["id"])
    assert backend.base_url == BODY["base_url"]
    assert credential_decrypt(backend.credential_encrypted) == SECRET
    moved = admin.patch(path, {"base_url": "http://127.0.0.1:10"}, format="json")
    assert moved.status_code == 200
    assert moved.json()["credential_set"] is True


def test_another_tenants_backend_credential_cannot_be_read_or_changed(api_client, tenant, other_tenant):
    theirs = (
        api_client(["admin"], of=other_tenant)
        .post("/api/v1/backends/", {**BODY, "credential": SECRET}, format="json")
        .json()
    )
    ours = api_client(["admin"])
    assert ours.get("/api/v1/backends/").json()["results"] == []
    path = f"/api/v1/backends/{theirs['id']}/"
    assert ours.get(path).status_code == 404
    assert ours.patch(path, {"credential": None}, format="json").status_code == 404
    assert ours.patch(path, {"base_url": "http://127.0.0.1:10"}, format="json").status_code == 404
    backend = InferenceBackend.objects.get(pk=theirs["id"])
    assert credential_decrypt(backend.credential_encrypted) == SECRET
    assert not AuditEvent.objects.filter(tenant=tenant, verb__startswith="backend.").exists()


def test_registerbackend_takes_the_credential_from_the_environment_idempotently(tenant, monkeypatch):
    monkeypatch.setenv("TEACHER_API_KEY", SECRET)
    arguments = ["acme", "--name", "teacher", "--url", "http://127.0.0.1:9", "--kind", "openai_compatible"]
    arguments += ["--model", "teacher", "--credential-env", "TEACHER_API_KEY", "--text-only"]
    arguments += ["--cap-parameter", "max_tokens"]
    out = StringIO()
    call_command("registerbackend", *arguments, stdout=out)
    call_command("registerbackend", *arguments, stdout=out)
    backend = InferenceBackend.objects.get(tenant=tenant, name="teacher")
    assert credential_decrypt(backend.credential_encrypted) == SECRET
    assert not any(getattr(backend, flag) for flag in FLAGS)
    assert backend.cap_parameter == "max_tokens"  # not the kind's default: asked for
    verbs = list(AuditEvent.objects.filter(tenant=tenant).values_list("verb", flat=True))
    assert "backend.credential_rotate" not in verbs  # the same key twice rotates nothing
    assert SECRET not in out.getvalue() + audit_dump(tenant)


def test_console_provider_settings(tenant, other_tenant, member):
    backend = BackendFactory(tenant=tenant, name="teacher", kind="openai_compatible")
    theirs = BackendFactory(tenant=other_tenant, name="theirs")
    admin, operator = Client(), Client()
    admin.force_login(member(Role.ADMIN))
    operator.force_login(member(Role.OPERATOR))
    path = f"/backends/{backend.pk}/provider/"
    settings_form = {
        "kind": "openai_compatible",
        "accepts_return_token_ids": "false",
        "cap_parameter": "max_completion_tokens",
        "credential": SECRET,
    }
    operator.post(path, settings_form)
    backend.refresh_from_db()
    assert not backend.credential_set
    assert backend.accepts_return_token_ids  # the refused form changed nothing
    assert admin.post(path, settings_form).status_code == 302
    backend.refresh_from_db()
    assert credential_decrypt(backend.credential_encrypted) == SECRET
    assert backend.accepts_return_token_ids is False
    assert backend.cap_parameter == "max_completion_tokens"
    assert backend.returns_token_ids is True  # left at "unchanged"
    page = admin.get("/backends/").content.decode()
    assert "set (…abcd)" in page
    assert "cap: <code>max_completion_tokens</code>" in page
    assert SECRET not in page
    assert 'name="credential"' in page
    assert 'name="credential"' not in operator.get("/backends/").content.decode()
    assert admin.post(path, {"kind": "openai_compatible", "clear_credential": "on"}).status_code == 302
    backend.refresh_from_db()
    assert not backend.credential_set
    assert admin.post(f"/backends/{theirs.pk}/provider/", settings_form).status_code == 404
    theirs.refresh_from_db()
    assert not theirs.credential_set
    verbs = list(
        AuditEvent.objects.filter(tenant=tenant, verb__startswith="backend.credential")
        .order_by("sequence")
        .values_list("verb", flat=True)
    )
    assert verbs == ["backend.credential_set", "backend.credential_clear"]


def test_console_registration_with_a_credential(tenant, member):
    admin = Client()
    admin.force_login(member(Role.ADMIN))
    response = admin.post(
        "/backends/",
        {**BODY, "weight": 1, "credential": SECRET, "returns_token_ids": "false", "returns_logprobs": ""},
    )
    assert response.status_code == 302
    backend = InferenceBackend.objects.get(tenant=tenant, name="hosted")
    assert credential_decrypt(backend.credential_encrypted) == SECRET
    assert backend.returns_token_ids is False
    assert backend.returns_logprobs is True  # the kind's default
    assert backend.cap_parameter == "max_completion_tokens"  # the kind's default too
    bad = admin.post("/backends/", {**BODY, "name": "bad", "weight": 1, "credential": "a b"})
    assert bad.status_code == 422
    assert not InferenceBackend.objects.filter(name="bad").exists()


@pytest.mark.django_db(transaction=True)
def test_the_control_planes_own_calls_carry_the_credential(gateway, settings, tenant):  # noqa: F811
    """The model proposer's call goes through the gateway, which sends the backend its credential."""
    from apps.loop.proposing import model_complete
    from tests.gateway.anthropic_app import serve_in_thread
    from tests.gateway.provider_standins import REPLY, openai_standin

    settings.AREAL_GATEWAY_URL = gateway[0]
    app, upstream = openai_standin(key=SECRET, model="teacher", refuses_max_tokens=True)
    with serve_in_thread(app) as url:
        BackendFactory(
            tenant=tenant,
            kind="openai_compatible",
            base_url=url,
            served_model="teacher",
            cap_parameter="max_completion_tokens",
            accepts_return_token_ids=False,  # a hosted provider: the gateway asks it for no token ids
        )
        backend = InferenceBackend.objects.get(tenant=tenant)
        backend.credential_encrypted = credential_encrypt(SECRET)
        backend.save()
        answer = model_complete(tenant=tenant, model="teacher")([{"role": "user", "content": "Propose"}])
    assert answer == REPLY
    call = upstream.of("/v1/chat/completions")[0]
    assert call["headers"]["authorization"] == f"Bearer {SECRET}"
    assert call["body"]["max_completion_tokens"] == 1024  # the field this backend reads, and only that one
    assert "max_tokens" not in call["body"]
