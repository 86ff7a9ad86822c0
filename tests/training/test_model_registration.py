"""A model directory registered as a tenant's model version (apps/training/registration.py), through the API,
the console's Models page and `manage.py registermodel`: admins only, from the tenant's own model inbox only,
copied with its checksums and audited; every refusal names its field and leaves nothing behind."""

import shutil

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.audit.models import AuditEvent
from apps.training.models import ModelVersion, VersionStatus
from tests.inference.factories import BackendFactory
from workers.inference.modelgen import tokenizer_fingerprint
from workers.models import manifest_problems
from workers.models.manifest import file_sha256

pytestmark = pytest.mark.django_db


@pytest.fixture
def storage(settings, tmp_path):
    """The model inbox and the registry's storage in this test's own directory."""
    settings.AREAL_MODEL_INBOX_DIR = tmp_path / "inbox"
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    return tmp_path


@pytest.fixture
def place(storage, default_model_dir):
    """place(tenant, directory) → a copy of the tiny default model in that tenant's inbox."""

    def make(tenant, directory="base"):
        target = storage / "inbox" / tenant.slug / directory
        shutil.copytree(default_model_dir, target)
        return target

    return make


def _register(client, name="support-bot", directory="base", **extra):
    return client.post(
        "/api/v1/model-versions/", {"name": name, "directory": directory, **extra}, format="json"
    )


def _registered_dirs(storage):
    models = storage / "models"
    return sorted(path for path in models.rglob("registered-*")) if models.exists() else []


def test_an_admin_registers_a_directory_of_the_inbox_as_version_0_then_as_the_next_version(
    api_client, admin_user, tenant, place, storage
):
    source = place(tenant)
    client = api_client(user=admin_user)
    response = _register(client, description="our base")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["number"], body["status"], body["parent_id"]) == (
        "support-bot",
        0,
        "candidate",
        None,
    )
    assert body["tokenizer_hash"] == tokenizer_fingerprint(source)
    assert body["description"] == "our base"
    version = ModelVersion.objects.get(pk=body["id"])
    copy = version.checkpoint_path
    assert copy.startswith(str(storage / "models" / tenant.slug / "support-bot" / "registered-"))
    assert manifest_problems(copy) == []
    files = version.metrics["registered"]["files"]
    assert files["model.safetensors"] == file_sha256(source / "model.safetensors")
    event = AuditEvent.objects.get(tenant=tenant, verb="model.register")
    assert (event.target_id, event.data["number"], event.data["directory"]) == (str(version.pk), 0, "base")

    (source / "model.safetensors").write_bytes(b"changed after registration")
    assert manifest_problems(copy) == []  # a copy: the inbox no longer matters

    shutil.rmtree(source)
    place(tenant)
    again = _register(client)
    assert again.status_code == 201, again.content
    assert (again.json()["number"], again.json()["parent_id"]) == (1, version.pk)


@pytest.mark.parametrize("role", ["operator", "annotator", "viewer"])
def test_only_admins_register_and_a_refusal_registers_nothing(
    api_client, member, tenant, place, storage, role
):
    place(tenant)
    response = _register(api_client(user=member(role)))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "role_forbidden"
    assert not ModelVersion.objects.exists()
    assert _registered_dirs(storage) == []


def test_a_key_needs_the_admin_scope(api_client, tenant, place):
    place(tenant)
    refused = _register(api_client(["inference"]))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "scope_missing"
    assert _register(api_client(["admin"])).status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"directory": "base"}, "name"),
        ({"name": "support-bot"}, "directory"),
        ({"name": "../escape", "directory": "base"}, "name"),
        ({"name": "support-bot", "directory": "missing"}, "directory"),
        ({"name": "support-bot", "directory": "../globex/base"}, "directory"),
        ({"name": "support-bot", "directory": "."}, "directory"),
        ({"name": "support-bot", "directory": "x" * 300}, "directory"),
    ],
)
def test_bad_input_names_its_field(api_client, tenant, other_tenant, place, storage, body, field):
    place(tenant)
    place(other_tenant)
    response = api_client().post("/api/v1/model-versions/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not ModelVersion.objects.filter(tenant=tenant).exists()
    assert _registered_dirs(storage) == []


def test_a_directory_name_the_file_system_cannot_hold_is_a_field_error(api_client, tenant, place):
    place(tenant)
    response = api_client().post(
        "/api/v1/model-versions/",
        '{"name": "support-bot", "directory": "base\\ud800"}',  # a lone surrogate, escaped in the JSON
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert "directory" in response.json()["error"]["fields"]


def test_another_tenants_inbox_is_out_of_reach_even_by_absolute_path(
    api_client, tenant, other_tenant, place, storage
):
    theirs = place(other_tenant, "secret-base")
    response = _register(api_client(), directory=str(theirs))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "directory_not_allowed"
    assert (
        str(storage / "inbox" / tenant.slug) not in response.json()["error"]["message"]
    )  # the inbox's place
    assert not ModelVersion.objects.exists()


def test_a_model_of_the_same_name_in_another_tenant_is_not_a_parent(api_client, tenant, other_tenant, place):
    place(tenant)
    place(other_tenant)
    theirs = _register(api_client(of=other_tenant))
    assert theirs.status_code == 201
    mine = _register(api_client())
    assert (mine.json()["number"], mine.json()["parent_id"]) == (0, None)
    listed = api_client().get("/api/v1/model-versions/").json()["results"]
    assert [row["id"] for row in listed] == [mine.json()["id"]]


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (lambda path: (path / "model.safetensors").unlink(), "no safetensors weights"),
        (
            lambda path: (path / "model.safetensors").rename(path / "pytorch_model.bin"),
            "pytorch_model.bin are pickled weights",
        ),
        (lambda path: (path / "tokenizer.json").unlink(), "no tokenizer.json"),
        (lambda path: (path / "config.json").write_text("not json"), "no readable config.json"),
        (lambda path: (path / "extra.safetensors").symlink_to("/etc/hostname"), "holds links"),
    ],
)
def test_a_directory_that_cannot_be_served_is_refused_with_the_reason(
    api_client, tenant, place, storage, spoil, problem
):
    spoil(place(tenant))
    response = _register(api_client())
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_model_directory"
    assert any(problem in text for text in error["fields"]["directory"]), error
    assert _registered_dirs(storage) == []


def test_a_next_version_must_keep_the_tokenizer(api_client, tenant, place, storage):
    from tokenizers import Tokenizer

    place(tenant)
    assert _register(api_client()).status_code == 201
    other = place(tenant, "retokenized")
    tokenizer = Tokenizer.from_file(str(other / "tokenizer.json"))
    tokenizer.add_special_tokens(["<|new-token|>"])
    tokenizer.save(str(other / "tokenizer.json"))
    response = _register(api_client(), directory="retokenized")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tokenizer_mismatch"
    assert ModelVersion.objects.filter(tenant=tenant).count() == 1
    assert len(_registered_dirs(storage)) == 1  # the refused copy was removed


def _signed_in(member, role):
    client = Client()
    client.force_login(member(role))
    return client


def test_the_models_page_registers_for_admins_only(member, tenant, place):
    place(tenant)
    admin = _signed_in(member, "admin")
    page = admin.get("/models/")
    assert page.status_code == 200
    assert b'id="register-model"' in page.content
    bad = admin.post("/models/register/", {"name": "support-bot", "directory": "nowhere"})
    assert bad.status_code == 400
    assert b'data-field="directory"' in bad.content
    assert not ModelVersion.objects.exists()
    done = admin.post("/models/register/", {"name": "support-bot", "directory": "base"})
    assert done.status_code == 302
    assert ModelVersion.objects.get(tenant=tenant).label == "support-bot@0"
    operator = _signed_in(member, "operator")
    assert b'id="register-model"' not in operator.get("/models/").content
    assert operator.post("/models/register/", {"name": "other", "directory": "base"}).status_code == 403
    assert ModelVersion.objects.filter(tenant=tenant).count() == 1


def test_registermodel_registers_any_directory_and_can_make_it_production(tenant, default_model_dir, storage):
    with pytest.raises(CommandError, match="no backend of cli-model serves version 0"):
        call_command(
            "registermodel",
            tenant.slug,
            "--name",
            "cli-model",
            "--dir",
            str(default_model_dir),
            "--production",
        )
    version = ModelVersion.objects.get(tenant=tenant, name="cli-model")
    assert version.status == VersionStatus.CANDIDATE  # registered; production waits for a backend
    BackendFactory(tenant=tenant, served_model="cli-model", model_version="1")
    call_command(
        "registermodel", tenant.slug, "--name", "cli-model", "--dir", str(default_model_dir), "--production"
    )
    served = ModelVersion.objects.get(tenant=tenant, name="cli-model", number=1)
    assert served.status == VersionStatus.PRODUCTION
    with pytest.raises(CommandError, match="no tenant"):
        call_command("registermodel", "nobody", "--name", "x", "--dir", str(default_model_dir))
