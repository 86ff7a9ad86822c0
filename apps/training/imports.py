"""Models that enter the registry from outside training: a GGUF file imported as a new model (its version 0),
and a version whose chat template a tenant replaced (a new version over the same weights).

Both write a model directory first (workers/models, atomically) and register it after, in one transaction;
a failed registration removes the directory, so neither a row without a directory nor a directory without
a row is left. Directories live under settings.AREAL_MODELS_DIR/<tenant slug>/<model name>/.
"""

import hashlib
import re
import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.tenants.models import Tenant
from apps.training.models import ModelVersion, VersionStatus
from apps.training.services import alias_move, model_version_register

# A model name becomes a directory name and the name agents ask for: letters, digits, dot, dash, underscore.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def model_directory(*, tenant: Tenant, name: str) -> Path:
    """Where this tenant's files of model `name` live."""
    return Path(settings.AREAL_MODELS_DIR) / tenant.slug / name


def model_name_check(*, tenant: Tenant, name: str) -> None:
    """ValidationFailed for a name unusable as a model and directory name; Conflict when the tenant has a
    model of that name already (an import is a new model: a new name)."""
    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name) or name in (".", ".."):
        raise ValidationFailed(
            f"model name {name!r} is not allowed: 1 to 100 letters, digits, '.', '-' or '_', starting with a "
            "letter or digit",
            fields={"name": ["not allowed"]},
        )
    if ModelVersion.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(
            f"this tenant has a model named {name} already; choose another name", code="model_exists"
        )


def model_import(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    gguf_path,
    out_dir=None,
    chat_template: str | None = None,
    source: dict | None = None,
    max_parameters_bytes: int | None = None,
) -> ModelVersion:
    """Converts the GGUF file at gguf_path (workers.models.convert_gguf) into out_dir (default
    model_directory()/v0) and registers it as version 0 of the new model `name`, in production with the
    `production` alias (a new model's base: nothing earlier to compare it with), the source's and files'
    sha256 in its metrics under "import". Tenancy: the model is the tenant's. Not one transaction: the
    conversion (a minute for a 135M-parameter model) runs first, outside any; the registration is atomic,
    and when it fails the directory is removed. Raises GgufError / ChatTemplateError (nothing written) and
    the registry's domain errors."""
    from workers.models import convert_gguf, remove_directory

    model_name_check(tenant=tenant, name=name)
    target = Path(out_dir) if out_dir else model_directory(tenant=tenant, name=name) / "v0"
    if max_parameters_bytes is None:
        max_parameters_bytes = settings.AREAL_MODEL_IMPORT_MAX_BYTES
    converted = convert_gguf(
        gguf_path,
        target,
        chat_template=chat_template,
        max_parameters_bytes=max_parameters_bytes,
        source=source,
    )
    try:
        return model_import_register(
            tenant=tenant,
            actor=actor,
            name=name,
            checkpoint_path=str(converted.path),
            tokenizer_hash=converted.tokenizer_fingerprint,
            record={
                **(source or {}),
                "gguf_file": converted.info.path.name,
                "gguf_sha256": converted.source_sha256,
                "architecture": converted.info.architecture,
                "parameters": converted.parameters,
                "quantizations": dict(converted.info.quantizations),
                "chat_template": converted.chat_template_origin,
                "files": dict(converted.files),
            },
        )
    except BaseException:
        remove_directory(converted.path)
        raise


@transaction.atomic
def model_import_register(
    *, tenant: Tenant, actor: Actor, name: str, checkpoint_path: str, tokenizer_hash: str, record: dict
) -> ModelVersion:
    """Registers an imported directory as version 0 of the new model `name` (production, aliased), with
    `record` (source, checksums) in its metrics under "import", and audits the import. Locking: the tenant
    row (through the audit append) serializes it against another import of the same name."""
    model_name_check(tenant=tenant, name=name)
    version = model_version_register(
        tenant=tenant,
        actor=actor,
        name=name,
        checkpoint_path=checkpoint_path,
        tokenizer_hash=tokenizer_hash,
        number=0,
        status=VersionStatus.PRODUCTION,
        metrics={"import": record},
        description=f"imported from {record.get('gguf_file') or 'a GGUF file'}"[:300],
    )
    alias_move(tenant=tenant, actor=actor, name=name, alias="production", version=version, reason="import")
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model.import",
        target=version,
        data={
            key: record.get(key)
            for key in ("gguf_file", "gguf_sha256", "package", "package_version", "chat_template")
        },
    )
    return version


def model_version_chat_template(*, tenant: Tenant, version: ModelVersion) -> str | None:
    """The chat template a version's directory carries (None when it has none or cannot be read)."""
    from workers.models import read_chat_template

    if version.tenant_id != tenant.pk:
        raise ValidationFailed("the version must be this tenant's")
    return read_chat_template(version.checkpoint_path)


def model_version_set_chat_template(
    *, tenant: Tenant, actor: Actor, version: ModelVersion, chat_template: str
) -> ModelVersion:
    """Registers a new version of `version`'s model that serves `chat_template` over `version`'s weights: a
    directory beside the model's others whose weight files are hard links to the parent's, whose
    tokenizer_config.json carries the template, registered as a candidate child of `version` (evaluation and
    releases decide what serves it, like any version). Servers read the template when they start on the
    directory, so it needs no change to them. The template is checked first by rendering a probe
    conversation with a tool, a tool call, a tool result and a generation prompt (workers/models); a refusal is
    ValidationFailed on `chat_template` (code invalid_chat_template), with nothing written. Tenancy: the
    version must be the tenant's. Not one transaction: the directory is written, then the registration is
    atomic; a failed registration removes the directory."""
    from transformers import AutoTokenizer

    from workers.models import (
        ChatTemplateError,
        read_chat_template,
        remove_directory,
        validate_chat_template,
        write_with_chat_template,
    )

    if version.tenant_id != tenant.pk:
        raise ValidationFailed("the version must be this tenant's")
    if not isinstance(chat_template, str):
        raise ValidationFailed("chat_template must be text", fields={"chat_template": ["must be text"]})
    source_dir = Path(version.checkpoint_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source_dir)
    except Exception as error:  # noqa: BLE001  (any unreadable directory reads the same to the tenant)
        raise ValidationFailed(
            f"{version.label} has no readable tokenizer in its checkpoint directory ({type(error).__name__})",
            code="checkpoint_unreadable",
        ) from None
    try:
        validate_chat_template(tokenizer, chat_template)
    except ChatTemplateError as error:
        raise ValidationFailed(
            str(error), fields={"chat_template": [str(error)]}, code="invalid_chat_template"
        ) from None
    if read_chat_template(source_dir) == chat_template:
        raise ValidationFailed(
            f"{version.label} serves this chat template already",
            fields={"chat_template": ["unchanged"]},
            code="chat_template_unchanged",
        )
    out = model_directory(tenant=tenant, name=version.name) / (
        f"v{version.number}-template-{secrets.token_hex(4)}"
    )
    digest = hashlib.sha256(chat_template.encode()).hexdigest()
    write_with_chat_template(
        source_dir, out, chat_template, source={"parent_version": version.number, "template_sha256": digest}
    )
    try:
        return _register_template_version(
            tenant=tenant, actor=actor, parent=version, checkpoint_path=out, template_sha256=digest
        )
    except BaseException:
        remove_directory(out)
        raise


@transaction.atomic
def _register_template_version(
    *, tenant: Tenant, actor: Actor, parent: ModelVersion, checkpoint_path: Path, template_sha256: str
) -> ModelVersion:
    from workers.models import read_manifest

    manifest = read_manifest(checkpoint_path) or {}
    version = model_version_register(
        tenant=tenant,
        actor=actor,
        name=parent.name,
        checkpoint_path=str(checkpoint_path),
        tokenizer_hash=parent.tokenizer_hash,  # the parent's tokenizer files, linked
        parent=parent,
        status=VersionStatus.CANDIDATE,
        metrics={
            "chat_template": {
                "sha256": template_sha256,
                "weights_of_version": parent.number,
                "files": manifest.get("files", {}),
            }
        },
        description=f"v{parent.number}'s weights with another chat template",
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model_version.chat_template",
        target=version,
        data={"parent": parent.number, "number": version.number, "template_sha256": template_sha256},
    )
    return version
