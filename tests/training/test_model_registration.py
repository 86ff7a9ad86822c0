"""A model directory registered as a tenant's model version (apps/training/registration.py), through the API,
the console's Models page and `manage.py registermodel`: admins only, from the tenant's own model inbox only,
copied with its checksums and audited; every refusal names its field and leaves nothing behind."""

import shutil
from pathlib import Path

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


# Links and swaps (issue 26, finding 7): the inbox is read through directory descriptors that never follow a link,
# copied first, and what is checked and registered is the copy.


@pytest.fixture
def outside(tmp_path_factory, default_model_dir):
    """A directory outside every inbox: a servable model and a secret beside it."""
    place = tmp_path_factory.mktemp("outside")
    shutil.copytree(default_model_dir, place / "model")
    (place / "model" / "secret.txt").write_bytes(b"outside-secret-6d1f")
    (place / "secret.txt").write_bytes(b"outside-secret-6d1f")
    return place


def _store_holds(storage, needle: bytes) -> bool:
    models = storage / "models"
    return models.exists() and any(
        needle in path.read_bytes() for path in models.rglob("*") if path.is_file()
    )


@pytest.mark.parametrize(
    "plant",
    [
        lambda source, outside: (source / "notes.txt").symlink_to(outside / "secret.txt"),
        lambda source, outside: (
            (source / "extra").mkdir()
            or (source / "extra" / "deeper").mkdir()
            or (source / "extra" / "deeper" / "notes.txt").symlink_to(outside / "secret.txt")
        ),
        lambda source, outside: (source / "linked").symlink_to(outside / "model"),
    ],
    ids=["a-file", "in-a-subdirectory", "a-directory"],
)
def test_a_link_anywhere_in_the_inbox_directory_is_refused_and_nothing_outside_is_copied(
    api_client, admin_user, tenant, place, storage, outside, plant
):
    plant(place(tenant), outside)
    response = _register(api_client(user=admin_user))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_model_directory"
    assert any("holds links" in text for text in error["fields"]["directory"]), error
    assert not ModelVersion.objects.exists()
    assert _registered_dirs(storage) == []
    assert not _store_holds(storage, b"outside-secret-6d1f")
    assert not AuditEvent.objects.filter(verb="model.register").exists()


@pytest.mark.parametrize("target", ["inside", "outside"])
def test_a_directory_reached_through_a_link_is_refused_even_when_the_link_stays_in_the_inbox(
    api_client, tenant, place, storage, outside, target
):
    source = place(tenant)
    (storage / "inbox" / tenant.slug / "alias").symlink_to(
        source if target == "inside" else outside / "model"
    )
    response = _register(api_client(), directory="alias")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "directory_not_allowed"
    assert "directory" in response.json()["error"]["fields"]
    assert str(outside) not in response.content.decode()
    assert not ModelVersion.objects.exists()
    assert _registered_dirs(storage) == []


def test_a_swap_after_the_check_brings_nothing_in_what_is_registered_is_exactly_the_copy(
    api_client, tenant, place, storage, outside, monkeypatch
):
    """The tenant swaps its inbox directory for a link to somewhere else at the moment the directory is
    checked. Before, the check read the inbox and the copy then read it again by name, following the link."""
    from workers.models import directory as model_directory

    source = place(tenant)
    original = {path.name: file_sha256(path) for path in source.iterdir() if path.is_file()}
    check = model_directory.model_directory_problems
    swapped = []

    def check_then_swap(path, **kwargs):
        if not swapped:
            parked = source.with_name("parked")
            source.rename(parked)
            source.symlink_to(outside / "model")
            swapped.append(parked)
        return check(path, **kwargs)

    monkeypatch.setattr(model_directory, "model_directory_problems", check_then_swap)
    response = _register(api_client())
    assert swapped  # the swap did happen while registering
    assert response.status_code == 201, response.content
    version = ModelVersion.objects.get(pk=response.json()["id"])
    copy = Path(version.checkpoint_path)
    copied = {path.name: file_sha256(path) for path in copy.iterdir() if path.name != "areal-model.json"}
    assert copied == original  # the inbox's files as they were, and nothing from behind the link
    assert version.metrics["registered"]["files"] == copied  # the record names the copy's bytes
    assert manifest_problems(copy) == []
    assert version.tokenizer_hash == tokenizer_fingerprint(copy)
    assert not _store_holds(storage, b"outside-secret-6d1f")


def test_the_copy_made_before_the_checks_is_bounded(
    api_client, tenant, place, storage, settings, monkeypatch
):
    from apps.training import registration

    place(tenant)
    settings.AREAL_MODEL_IMPORT_MAX_BYTES = 1000
    monkeypatch.setattr(registration, "NON_WEIGHT_BYTES", 1000)
    response = _register(api_client())
    assert response.status_code == 400, response.content
    assert any(
        "holds more than 2,000 bytes" in text for text in response.json()["error"]["fields"]["directory"]
    )
    assert _registered_dirs(storage) == []
    assert not [path for path in (storage / "models").rglob("*") if path.is_file()]
    assert not ModelVersion.objects.exists()
