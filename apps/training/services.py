"""Writes to the model registry: versions (their registration, status and metrics) and aliases. Every
governance act is audited. Training jobs' writes are in `apps.training.jobs`, online runs' in
`apps.training.online`."""

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, ValidationFailed
from apps.tenants.models import Tenant
from apps.training.models import (
    VERSION_TRANSITIONS,
    AliasMove,
    ModelAlias,
    ModelVersion,
    VersionStatus,
)


@transaction.atomic
def model_version_register(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    checkpoint_path: str,
    tokenizer_hash: str,
    parent: ModelVersion | None = None,
    status: str = VersionStatus.CANDIDATE,
    dataset_snapshot: dict | None = None,
    metrics: dict | None = None,
    description: str = "",
    number: int | None = None,
    harness=None,
    weights_of: ModelVersion | None = None,
) -> ModelVersion:
    """Registers the next version of `name` (0 for the first). Tenancy: the parent must be this tenant's and
    of the same model; its tokenizer must match (a version with another tokenizer is a new model).
    Harness (apps.evolution): without `harness`, a version inherits its parent's, so the weights an online
    run or a training job learns from a harnessed version are served with the harness they were learnt
    under; `weights_of` makes a harness-only version (served by that version's backends).
    Locking: the tenant row serializes numbering (through the audit append)."""
    if not name or not checkpoint_path or not tokenizer_hash:
        raise ValidationFailed("a model version needs a name, a checkpoint path and a tokenizer hash")
    if status not in VersionStatus.values:
        raise ValidationFailed(f"unknown status {status!r}", fields={"status": ["unknown"]})
    if parent is not None:
        if parent.tenant_id != tenant.pk or parent.name != name:
            raise ValidationFailed(
                "the parent must be a version of the same model in this tenant",
                fields={"parent": ["not a version of this model"]},
            )
        if parent.tokenizer_hash != tokenizer_hash:
            raise ValidationFailed(
                "the tokenizer differs from the parent's; register it as another model",
                fields={"tokenizer_hash": ["differs from the parent's"]},
                code="tokenizer_mismatch",
            )
    if harness is None and parent is not None:
        harness = parent.harness
    if harness is not None and (harness.tenant_id != tenant.pk or harness.model != name):
        raise ValidationFailed(
            f"the harness must be this tenant's, for the model {name}",
            fields={"harness": ["not of this model"]},
        )
    if weights_of is not None and (weights_of.tenant_id != tenant.pk or weights_of.name != name):
        raise ValidationFailed(
            "weights_of must be a version of the same model in this tenant",
            fields={"weights_of": ["not a version of this model"]},
        )
    type(tenant).objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()
    if number is None:
        highest = ModelVersion.objects.filter(tenant=tenant, name=name).aggregate(top=Max("number"))["top"]
        number = 0 if highest is None else highest + 1
    elif ModelVersion.objects.filter(tenant=tenant, name=name, number=number).exists():
        raise Conflict(f"{name} version {number} exists already", code="version_exists")
    version = ModelVersion.objects.create(
        tenant=tenant,
        name=name,
        number=number,
        parent=parent,
        checkpoint_path=checkpoint_path,
        tokenizer_hash=tokenizer_hash,
        status=status,
        dataset_snapshot=dataset_snapshot or {},
        metrics=metrics or {},
        description=description,
        created_by=actor.label,
        harness=harness,
        weights_of=weights_of,
    )
    data = {"name": name, "number": number, "parent": parent.number if parent else None, "status": status}
    if harness is not None:
        data["harness"] = harness.label
    if weights_of is not None:
        data["weights_of"] = weights_of.number
    audit_record(tenant=tenant, actor=actor, verb="model_version.register", target=version, data=data)
    return version


@transaction.atomic
def model_version_set_status(
    *, tenant: Tenant, actor: Actor, version_id: int, status: str, reason: str = ""
) -> ModelVersion:
    """Moves a version along VERSION_TRANSITIONS; a forbidden move raises Conflict (409) and changes nothing.
    Locking: the version row."""
    version = ModelVersion.objects.select_for_update().get(tenant=tenant, pk=version_id)
    if status == version.status:
        return version
    if status not in VERSION_TRANSITIONS.get(version.status, frozenset()):
        raise Conflict(f"{version} is {version.status}; it cannot become {status}", code="invalid_transition")
    previous, version.status = version.status, status
    version.save(update_fields=["status"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model_version.status",
        target=version,
        data={"from": previous, "to": status, "reason": reason},
    )
    return version


@transaction.atomic
def model_version_update_metrics(*, tenant: Tenant, version_id: int, metrics: dict) -> ModelVersion:
    """Merges metrics into the version's (evaluation and training figures); not a governance act."""
    version = ModelVersion.objects.select_for_update().get(tenant=tenant, pk=version_id)
    version.metrics = {**version.metrics, **metrics}
    version.save(update_fields=["metrics"])
    return version


# Aliases that move only with what serves (apps/releases: a release's promotion, a model's first production,
# direct publication), never by hand: the gateway's routing, the statuses and the alias must agree.
SERVING_ALIASES = frozenset({"production"})


def alias_check_movable(*, alias: str) -> None:
    """Refuses (409 `alias_moves_with_serving`) a hand move of an alias that follows what serves."""
    if alias in SERVING_ALIASES:
        raise Conflict(
            f"the {alias} alias moves with what serves: release a version, make a model's first version production "
            "(POST /api/v1/routing/) or publish one directly",
            code="alias_moves_with_serving",
            fields={"alias": ["moves with what serves"]},
        )


@transaction.atomic
def alias_move(
    *, tenant: Tenant, actor: Actor, name: str, alias: str, version: ModelVersion, reason: str = ""
) -> ModelAlias:
    """Points `name:alias` at `version`, appending the move to the alias history (never edited).
    Locking: the alias row (created on first move)."""
    if version.tenant_id != tenant.pk or version.name != name:
        raise ValidationFailed("the version must be one of this model's in this tenant")
    now = timezone.now()
    current = ModelAlias.objects.select_for_update().filter(tenant=tenant, name=name, alias=alias).first()
    previous = current.version if current else None
    if current is not None and previous is not None and previous.pk == version.pk:
        return current
    if current is None:
        current = ModelAlias.objects.create(
            tenant=tenant, name=name, alias=alias, version=version, updated_at=now
        )
    else:
        current.version, current.updated_at = version, now
        current.save(update_fields=["version", "updated_at"])
    AliasMove.objects.create(
        tenant=tenant,
        name=name,
        alias=alias,
        from_version=previous,
        to_version=version,
        actor=actor.label,
        reason=reason,
        moved_at=now,
    )
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="model_alias.move",
        target=version,
        data={
            "name": name,
            "alias": alias,
            "from": previous.number if previous else None,
            "to": version.number,
            "reason": reason,
        },
    )
    return current
