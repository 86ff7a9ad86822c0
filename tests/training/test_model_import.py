"""manage.py importmodel: a GGUF (here the default model exported to one) becomes a tenant's new model,
version 0, audited, with its checksums; every refusal is one line, a non-zero exit, and nothing half-done."""

import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.audit.models import AuditEvent
from apps.training.models import ModelAlias, ModelVersion, VersionStatus
from tests.servers import ROOT
from tests.tenants.factories import TenantFactory
from tests.training.factories import ModelVersionFactory
from tests.workers.models.gguf_files import export_llama, write_tiny
from workers.inference.modelgen import tokenizer_fingerprint
from workers.models import manifest_problems, read_manifest
from workers.models.manifest import file_sha256

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def gguf_file(default_model_dir, tmp_path_factory):
    return export_llama(default_model_dir, tmp_path_factory.mktemp("gguf") / "default.gguf")


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.AREAL_MODELS_DIR = tmp_path / "models"
    return settings.AREAL_MODELS_DIR


def _import(*arguments):
    call_command("importmodel", *arguments)


def test_import_registers_version_0_with_checksums_and_audits_it(tenant, gguf_file, models_dir):
    _import("--gguf", str(gguf_file), "--name", "imported", "--tenant", tenant.slug)
    version = ModelVersion.objects.get(tenant=tenant, name="imported")
    path = models_dir / tenant.slug / "imported" / "v0"
    assert (version.number, version.parent, version.status) == (0, None, VersionStatus.PRODUCTION)
    assert version.checkpoint_path == str(path)
    assert version.tokenizer_hash == tokenizer_fingerprint(path)
    assert ModelAlias.objects.get(tenant=tenant, name="imported", alias="production").version == version
    record = version.metrics["import"]
    assert record["gguf_sha256"] == file_sha256(gguf_file)
    assert record["gguf_file"] == gguf_file.name
    assert record["files"] == read_manifest(path)["files"]
    assert record["chat_template"] == "model"
    assert record["architecture"] == "llama"
    assert manifest_problems(path) == []
    verbs = list(AuditEvent.objects.filter(tenant=tenant).values_list("verb", flat=True))
    assert {"model_version.register", "model_alias.move", "model.import"} <= set(verbs)
    event = AuditEvent.objects.get(tenant=tenant, verb="model.import")
    assert event.data["gguf_sha256"] == record["gguf_sha256"]


def test_no_register_converts_only(tenant, gguf_file, tmp_path):
    out = tmp_path / "plain"
    _import("--gguf", str(gguf_file), "--name", "plain", "--no-register", "--out", str(out))
    assert manifest_problems(out) == []
    assert not ModelVersion.objects.filter(name="plain").exists()
    assert not AuditEvent.objects.filter(verb="model.import").exists()


def test_an_existing_model_name_is_refused_before_converting(tenant, gguf_file, models_dir):
    ModelVersionFactory(tenant=tenant, name="taken")
    with pytest.raises(CommandError, match="this tenant has a model named taken already"):
        _import("--gguf", str(gguf_file), "--name", "taken", "--tenant", tenant.slug)
    assert not models_dir.exists()
    # another tenant may use the name
    other = TenantFactory(slug="other")
    _import("--gguf", str(gguf_file), "--name", "taken", "--tenant", other.slug)
    assert ModelVersion.objects.get(tenant=other, name="taken").number == 0


@pytest.mark.parametrize("name", ["../escape", "with space", "", "-dash", "a" * 101])
def test_a_name_unusable_as_a_directory_is_refused(tenant, gguf_file, models_dir, name):
    with pytest.raises(CommandError, match="is not allowed"):
        _import("--gguf", str(gguf_file), f"--name={name}", "--tenant", tenant.slug)
    assert not models_dir.exists()


def test_a_failed_conversion_leaves_no_row_and_no_directory(tenant, models_dir, tmp_path):
    bad = write_tiny(tmp_path / "bert.gguf", architecture="bert")
    with pytest.raises(CommandError, match="bert.gguf: architecture 'bert' is not supported"):
        _import("--gguf", str(bad), "--name", "bad", "--tenant", tenant.slug)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(write_tiny(tmp_path / "whole.gguf").read_bytes()[:40])
    with pytest.raises(CommandError, match="cut.gguf: truncated GGUF file"):
        _import("--gguf", str(truncated), "--name", "bad", "--tenant", tenant.slug)
    assert not ModelVersion.objects.filter(tenant=tenant).exists()
    assert not (models_dir / tenant.slug / "bad").exists() or not any(
        (models_dir / tenant.slug / "bad").iterdir()
    )
    assert not AuditEvent.objects.filter(tenant=tenant).exists()


def test_a_failed_registration_removes_the_directory(tenant, gguf_file, models_dir, monkeypatch):
    """Fault injection: the alias move (inside the registration's transaction) fails after the version row
    was written; the transaction rolls back and the converted directory is removed."""
    from apps.training import imports

    def failing_alias_move(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(imports, "alias_move", failing_alias_move)
    with pytest.raises(RuntimeError, match="database went away"):
        _import("--gguf", str(gguf_file), "--name", "doomed", "--tenant", tenant.slug)
    assert not ModelVersion.objects.filter(tenant=tenant).exists()
    assert not AuditEvent.objects.filter(tenant=tenant).exists()
    model_dir = models_dir / tenant.slug / "doomed"
    assert not model_dir.exists() or list(model_dir.iterdir()) == []


def test_a_chat_template_file_is_used_or_refused(tenant, gguf_file, models_dir, tmp_path):
    from workers.inference.chat_template import CHAT_TEMPLATE
    from workers.models import read_chat_template

    refused = tmp_path / "bad.jinja"
    refused.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(CommandError, match="the chat template is refused: renders no assistant generation"):
        _import(
            "--gguf", str(gguf_file), "--name", "t", "--tenant", tenant.slug, "--chat-template", str(refused)
        )
    assert not ModelVersion.objects.filter(tenant=tenant).exists()
    with pytest.raises(CommandError, match="cannot read the chat template"):
        _import(
            "--gguf",
            str(gguf_file),
            "--name",
            "t",
            "--tenant",
            tenant.slug,
            "--chat-template",
            "/nonexistent.j2",
        )
    good = tmp_path / "good.jinja"
    good.write_text(CHAT_TEMPLATE.replace("helpful assistant", "careful assistant"))
    _import("--gguf", str(gguf_file), "--name", "t", "--tenant", tenant.slug, "--chat-template", str(good))
    version = ModelVersion.objects.get(tenant=tenant, name="t")
    assert read_chat_template(version.checkpoint_path) == good.read_text()
    assert version.metrics["import"]["chat_template"] == "file"


def test_other_refusals_are_one_line(tenant, gguf_file, models_dir):
    with pytest.raises(CommandError, match="the package no-such-dist is not installed"):
        _import("--package", "no-such-dist", "--name", "x", "--tenant", tenant.slug)
    with pytest.raises(CommandError, match="no tenant with slug 'nobody'"):
        _import("--gguf", str(gguf_file), "--name", "x", "--tenant", "nobody")
    with pytest.raises(CommandError, match="--tenant is required"):
        _import("--gguf", str(gguf_file), "--name", "x")
    with pytest.raises(CommandError, match=r"over the 0\.00 GiB this installation allows"):
        _import("--gguf", str(gguf_file), "--name", "x", "--tenant", tenant.slug, "--max-bytes", "1000")
    assert not models_dir.exists()


def test_the_command_exits_non_zero_with_one_line(tmp_path):
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"not a model at all")
    result = subprocess.run(
        [sys.executable, "manage.py", "importmodel", "--gguf", str(bad), "--name", "x", "--no-register"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["CommandError: not.gguf: not a GGUF file (it starts with b'not ', not b'GGUF')"]
