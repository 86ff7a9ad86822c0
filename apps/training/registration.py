"""A model directory registered as a tenant's model version: a base brought in from outside training (made by
`manage.py initmodel`, `importmodel --no-register`, or any Hugging Face causal-LM directory with safetensors
weights, a fast tokenizer and a chat template: workers/models/directory.py).

Where it may come from: the installation's file system is not tenant input. Through the API and the console a
tenant names a directory inside its own inbox, settings.AREAL_MODEL_INBOX_DIR/<tenant slug>/ (a relative
name is read from there; a path that leads elsewhere, by `..` or an absolute path, is refused, and so is a link
anywhere below the inbox, even one that leads back into it).
`manage.py registermodel`, run by whoever runs the installation, may name any directory.

What is registered: a copy under AREAL_MODELS_DIR/<tenant slug>/<model>/registered-<random>, made first
(through directory descriptors, never following a link) and checked afterwards, with a manifest of every
file's sha256 (in the version's metrics under "registered"), so a later change in the inbox changes
nothing that serves. A new model name becomes version 0; an existing model gets its next number, parent = its
production version (else its newest), and must keep that parent's tokenizer (else 400 tokenizer_mismatch: a
new tokenizer is a new model). Either way the version is a candidate: `apps.releases.serving.production_set`
makes a model's first version production, a release any later one.
"""

import os
import secrets
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db import transaction

from apps.audit.services import Actor, audit_record
from apps.core.errors import ValidationFailed
from apps.tenants.models import Tenant
from apps.training.imports import MODEL_NAME, model_directory
from apps.training.models import ModelVersion, VersionStatus
from apps.training.selectors import alias_resolve, model_version_list
from apps.training.services import model_version_register

# What a registered directory may hold besides its weights (tokenizer, config, templates, a README), copied
# before anything is checked: the copy stops there, so a huge inbox file cannot fill the model store.
NON_WEIGHT_BYTES = 1 << 30


def model_inbox(*, tenant: Tenant) -> Path:
    """The one directory this tenant may register model directories from."""
    return Path(settings.AREAL_MODEL_INBOX_DIR) / tenant.slug


@dataclass(frozen=True)
class SourceDirectory:
    """A model directory to register: `relative` (names, one per level) below `root`. `root` is trusted as it
    is named (the tenant's inbox, or the operator's own directory); nothing below it is reached through a
    link, and it is opened through descriptors, never by its name again (workers.models.directory)."""

    root: Path
    relative: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.relative[-1] if self.relative else self.root.name


def model_inbox_resolve(*, tenant: Tenant, directory: str) -> SourceDirectory:
    """The directory `directory` names inside the tenant's inbox (relative to it, or absolute and inside it),
    read by its names alone: no `..`, no link on the way (a link that leads back into the inbox is refused
    too). ValidationFailed on `directory` when it leads outside the inbox (`directory_not_allowed`) or is not
    a directory there (`directory_missing`). The message names the directory as given, never where the inbox
    is on this machine. The check is for a clear refusal; the copy walks the names again through
    descriptors, so a change between the two brings nothing in."""
    from workers.models.directory import ModelDirectoryRefused, open_model_directory

    if not isinstance(directory, str) or not directory.strip() or "\x00" in directory:
        raise ValidationFailed("name a directory", fields={"directory": ["required"]})
    inbox = model_inbox(tenant=tenant)
    outside = ValidationFailed(
        f"{directory!r} is outside this tenant's model inbox; put the model directory in the inbox and "
        "name it relative to the inbox",
        fields={"directory": ["outside the model inbox"]},
        code="directory_not_allowed",
    )
    candidate = PurePosixPath(directory.strip())
    if candidate.is_absolute():
        inside = next(
            (
                candidate.relative_to(base)
                for base in {PurePosixPath(os.path.abspath(inbox)), PurePosixPath(inbox.resolve())}
                if candidate.is_relative_to(base)
            ),
            None,
        )
        if inside is None:
            raise outside
        candidate = inside
    relative = tuple(part for part in candidate.parts if part != ".")
    if not relative or ".." in relative:
        raise outside
    source = SourceDirectory(root=inbox, relative=relative)
    try:
        os.close(open_model_directory(inbox, relative))
    except ModelDirectoryRefused as refused:
        if any("link" in problem for problem in refused.problems):
            raise ValidationFailed(
                f"{directory!r} is reached through a link; links in the model inbox are refused (they could "
                "lead anywhere): put the directory itself in the inbox",
                fields={"directory": ["reached through a link"]},
                code="directory_not_allowed",
            ) from None
        raise ValidationFailed(
            f"{directory!r} is not a directory in this tenant's model inbox",
            fields={"directory": ["no such directory"]},
            code="directory_missing",
        ) from None
    return source


def model_directory_register(
    *, tenant: Tenant, actor: Actor, name: str, source_dir: SourceDirectory, description: str = ""
) -> ModelVersion:
    """Copies `source_dir` into the tenant's model storage, checks the copy (workers.models.directory) and
    registers it as the next version of `name` (see the module's docstring), a candidate; audited
    `model.register`. `source_dir` must already be allowed (model_inbox_resolve, or the command's own
    operator). Copy first, then check: the source is read once, through descriptors that never follow a link,
    and every check (files, size, tokenizer, the manifest's checksums) reads the copy, so what is registered is
    exactly what was checked, whatever changes in the source meanwhile. Not one transaction: the copy is
    written first, outside any; the registration is atomic and a refused or failed one removes the copy.
    Refusals are ValidationFailed with the field: `name`, `directory`, or `tokenizer_hash` (code
    tokenizer_mismatch)."""
    from workers.inference.modelgen import tokenizer_fingerprint
    from workers.models import remove_directory
    from workers.models.directory import (
        ModelDirectoryRefused,
        copy_model_directory,
        model_directory_problems,
    )

    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
        raise ValidationFailed(
            f"model name {name!r} is not allowed: 1 to 100 letters, digits, '.', '-' or '_', starting with a "
            "letter or digit",
            fields={"name": ["not allowed"]},
        )
    max_weight_bytes = settings.AREAL_MODEL_IMPORT_MAX_BYTES
    out = model_directory(tenant=tenant, name=name) / f"registered-{secrets.token_hex(4)}"
    try:
        manifest = copy_model_directory(
            source_dir.root,
            out,
            relative=source_dir.relative,
            source={"directory": source_dir.name},
            max_bytes=max_weight_bytes + NON_WEIGHT_BYTES,
        )
    except ModelDirectoryRefused as refused:
        raise _unservable(refused.problems) from None
    try:
        problems = model_directory_problems(out, max_weight_bytes=max_weight_bytes)
        if problems:
            raise _unservable(problems)
        try:
            tokenizer_hash = tokenizer_fingerprint(out)
        except Exception as error:  # noqa: BLE001  (any unreadable tokenizer reads the same to the tenant)
            raise ValidationFailed(
                f"the directory's tokenizer.json cannot be read ({type(error).__name__})",
                fields={"directory": ["unreadable tokenizer.json"]},
                code="invalid_model_directory",
            ) from None
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


def _unservable(problems: list[str]) -> ValidationFailed:
    return ValidationFailed(
        f"the directory cannot be served as it is: it {'; it '.join(problems)}",
        fields={"directory": problems},
        code="invalid_model_directory",
    )


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
