from apps.audit.services import Actor
from apps.releases.models import Release, ReleaseStatus
from apps.releases.services import release_create
from apps.training.models import VersionStatus
from apps.training.services import alias_move, model_version_register
from tests.releases.factories import ReleaseFactory

SYSTEM = Actor.system("test")
MODEL = "policy-small"


def register_versions(
    tenant,
    *,
    name=MODEL,
    tokenizer="tokenizer-a",
    candidate_tokenizer=None,
    candidate_status=VersionStatus.CANDIDATE,
):
    """(baseline v0 in production behind the `production` alias, candidate v1 trained from it)."""
    baseline = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=name,
        checkpoint_path="/models/base",
        tokenizer_hash=tokenizer,
        status=VersionStatus.PRODUCTION,
    )
    alias_move(tenant=tenant, actor=SYSTEM, name=name, alias="production", version=baseline)
    candidate = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=name,
        checkpoint_path="/models/v1",
        tokenizer_hash=candidate_tokenizer or tokenizer,
        status=candidate_status,
        parent=None if candidate_tokenizer else baseline,
    )
    return baseline, candidate


def weights(directory):
    """A checkpoint directory a server could load (only its presence is read: the servers behind these tests
    are stand-ins)."""
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def version_over(tenant, checkpoint, *, parent=None, status=VersionStatus.CANDIDATE, name=MODEL):
    """A version registered over `checkpoint`, whatever it holds."""
    return model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=name,
        checkpoint_path=str(checkpoint),
        tokenizer_hash="tokenizer-a",
        parent=parent,
        status=status,
    )


def version_with_weights(tenant, directory, *, parent=None, status=VersionStatus.CANDIDATE, name=MODEL):
    """A version registered over a new checkpoint directory holding a safetensors file."""
    return version_over(tenant, weights(directory), parent=parent, status=status, name=name)


def serve_versions(tenant, *versions):
    """A backend row per version holding its weights (the model's serving slots), so a release of them starts
    without loading anything (apps/releases/provisioning.py): no server behind them."""
    from tests.inference.factories import BackendFactory

    return [
        BackendFactory(tenant=tenant, served_model=version.name, model_version=str(version.number))
        for version in versions
    ]


def release_at(
    tenant,
    status: str,
    *,
    stage_index: int = -1,
    started_by: Actor | None = None,
    served: bool = False,
    **plan,
) -> Release:
    """A release of a fresh candidate put straight into `status` (for state-machine and approval tests); with
    `served`, backend rows hold both versions (serve_versions), so the release can be started."""
    baseline, candidate = register_versions(tenant)
    if served:
        serve_versions(tenant, baseline, candidate)
    release = release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk, **plan)
    fields = {"status": status, "stage_index": stage_index}
    if started_by is not None:
        fields |= {
            "started_by_kind": started_by.kind,
            "started_by_id": started_by.id,
            "started_by": started_by.label,
        }
    Release.objects.filter(pk=release.pk).update(**fields)
    if status in {ReleaseStatus.CANARY, ReleaseStatus.PAUSED, ReleaseStatus.AWAITING_APPROVAL}:
        from apps.training.services import model_version_set_status

        model_version_set_status(
            tenant=tenant, actor=SYSTEM, version_id=candidate.pk, status=VersionStatus.CANARY
        )
    release.refresh_from_db()
    return release


def release_row(tenant, status: str = ReleaseStatus.DRAFT) -> Release:
    """ReleaseFactory under its old name, for tests/core/test_immutable.py, which other work is adding."""
    return ReleaseFactory(tenant=tenant, status=status)
