"""A model directory registered as a tenant's model version: a base brought in from outside training (made by
`manage.py initmodel`, `importmodel --no-register`, or any Hugging Face causal-LM directory with safetensors
weights, a fast tokenizer and a chat template: workers/models/directory.py).

Where it may come from: the installation's file system is not tenant input. Through the API and the console a
tenant names a directory inside its own inbox, settings.AREAL_MODEL_INBOX_DIR/<tenant slug>/ (a relative
name is read from there; a path that leads elsewhere, by `..`, an absolute path or a link, is refused).
`manage.py registermodel`, run by whoever runs the installation, may name any directory.

What is registered: a copy under AREAL_MODELS_DIR/<tenant slug>/<model>/registered-<random> with a manifest
of every file's sha256 (in the version's metrics under "registered"), so a later change in the inbox changes
nothing that serves. A new model name becomes version 0; an existing model gets its next number, parent = its
production version (else its newest), and must keep that parent's tokenizer (else 400 tokenizer_mismatch: a
new tokenizer is a new model). Either way the version is a candidate: `apps.releases.serving.production_set`
makes a model's first version production, a release any later one.
"""

import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.training.imports import MODEL_NAME, model_directory
from apps.training.models import ModelVersion, VersionStatus
from apps.training.selectors import alias_resolve, model_version_list
from apps.training.services import model_version_register


def model_inbox(*, tenant: Tenant) -> Path:
    """The one directory this tenant may register model directories from."""
    return Path(settings.AREAL_MODEL_INBOX_DIR) / tenant.slug


def model_inbox_resolve(*, tenant: Tenant, directory: str) -> Path:
    """The directory `directory` names inside the tenant's inbox (relative to it, or absolute and inside it),
    resolved; ValidationFailed on `directory` when it leads outside the inbox or does not exist. The message
    names the directory as given, never where the inbox is on this machine."""
    if not isinstance(directory, str) or not directory.strip() or "\x00" in directory:
        raise ValidationFailed("name a directory", fields={"directory": ["required"]})
    inbox = model_inbox(tenant=tenant).resolve()
    candidate = Path(directory.strip())
    try:
        path = (candidate if candidate.is_absolute() else inbox / candidate).resolve()
    except (OSError, ValueError):  # a name the file system cannot hold (a lone surrogate, a loop of links)
        path = inbox
    if path == inbox or not path.is_relative_to(inbox):
        raise ValidationFailed(
            f"{directory!r} is outside this tenant's model inbox; put the model directory in the inbox and "
            "name it relative to the inbox",
            fields={"directory": ["outside the model inbox"]},
            code="directory_not_allowed",
        )
    try:
        present = path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, say: no such directory either
        present = False
    if not present:
        raise ValidationFailed(
            f"{directory!r} is not a directory in this tenant's model inbox",
            fields={"directory": ["no such directory"]},
            code="directory_missing",
        )
    return path


def model_directory_register(
    *, tenant: Tenant, actor: Actor, name: str, source_dir: Path, description: str = ""
) -> ModelVersion:
    """Checks `source_dir` (workers.models.directory), copies it into the tenant's model storage and registers
    the copy as the next version of `name` (see the module's docstring), a candidate; audited
    `model.register`. `source_dir` must already be allowed (model_inbox_resolve, or the command's own
    operator). Not one transaction: the copy is written first, outside any; the registration is atomic and a
    failed one removes the copy. Refusals are ValidationFailed with the field: `name`, `directory`, or
    `tokenizer_hash` (code tokenizer_mismatch)."""
    from workers.inference.modelgen import tokenizer_fingerprint
    from workers.models import remove_directory
    from workers.models.directory import copy_model_directory, model_directory_problems

    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
        raise ValidationFailed(
            f"model name {name!r} is not allowed: 1 to 100 letters, digits, '.', '-' or '_', starting with a "
            "letter or digit",
            fields={"name": ["not allowed"]},
        )
    problems = model_directory_problems(source_dir, max_weight_bytes=settings.AREAL_MODEL_IMPORT_MAX_BYTES)
    if problems:
        raise ValidationFailed(
            f"the directory cannot be served as it is: it {'; it '.join(problems)}",
            fields={"directory": problems},
            code="invalid_model_directory",
        )
    try:
        tokenizer_hash = tokenizer_fingerprint(source_dir)
    except Exception as error:  # noqa: BLE001  (any unreadable tokenizer reads the same to the tenant)
        raise ValidationFailed(
            f"the directory's tokenizer.json cannot be read ({type(error).__name__})",
            fields={"directory": ["unreadable tokenizer.json"]},
            code="invalid_model_directory",
        ) from None
    out = model_directory(tenant=tenant, name=name) / f"registered-{secrets.token_hex(4)}"
    manifest = copy_model_directory(source_dir, out, source={"directory": source_dir.name})
    try:
        return _register(
            tenant=tenant,
            actor=actor,
            name=name,
            checkpoint_path=str(out),
            tokenizer_hash=tokenizer_hash,
            record={"directory": source_dir.name, "files": manifest["files"]},
            description=description,
        )
    except BaseException:
        remove_directory(out)
        raise


@transaction.atomic
def _register(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    checkpoint_path: str,
    tokenizer_hash: str,
    record: dict,
    description: str,
) -> ModelVersion:
    parent = alias_resolve(tenant=tenant, name=name, alias="production") or (
        model_version_list(tenant=tenant, name=name).order_by("-number").first()
    )
    version = model_version_register(
        tenant=tenant,
        actor=actor,
        name=name,
        checkpoint_path=checkpoint_path,
        tokenizer_hash=tokenizer_hash,
        parent=parent,
        status=VersionStatus.CANDIDATE,
        metrics={"registered": record},
        description=(description or f"registered from the directory {record['directory']}")[:300],
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model.register",
        target=version,
        data={
            "name": name,
            "number": version.number,
            "directory": record["directory"],
            "files": record["files"],
        },
    )
    return version
