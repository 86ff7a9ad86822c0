"""The model registry: numbered versions with lineage, guarded status moves, aliases with an immutable
history that answers "which version did this alias name at moment T"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.training import selectors, services
from apps.training.models import AliasMove, ModelVersion, VersionStatus

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


def _register(tenant, parent=None, **extra):
    return services.model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name="policy",
        checkpoint_path="/ckpt",
        tokenizer_hash="tok-a",
        parent=parent,
        **extra,
    )


def test_versions_are_numbered_per_model_with_their_parent(tenant, other_tenant):
    base = _register(tenant)
    child = _register(tenant, parent=base)
    grandchild = _register(tenant, parent=child)
    theirs = _register(other_tenant)
    assert (base.number, child.number, grandchild.number, theirs.number) == (0, 1, 2, 0)
    lineage = selectors.model_lineage(tenant=tenant, name="policy")
    assert [(row["number"], row["parent"]) for row in lineage] == [(0, None), (1, 0), (2, 1)]
    assert AuditEvent.objects.filter(tenant=tenant, verb="model_version.register").count() == 3


def test_a_parent_must_share_tenant_model_and_tokenizer(tenant, other_tenant):
    theirs = _register(other_tenant)
    with pytest.raises(ValidationFailed):
        _register(tenant, parent=theirs)
    base = _register(tenant)
    with pytest.raises(ValidationFailed) as mismatch:
        services.model_version_register(
            tenant=tenant,
            actor=SYSTEM,
            name="policy",
            checkpoint_path="/c",
            tokenizer_hash="tok-b",
            parent=base,
        )
    assert mismatch.value.code == "tokenizer_mismatch"
    assert ModelVersion.objects.filter(tenant=tenant).count() == 1


@pytest.mark.parametrize(
    ("start", "target", "allowed"),
    [
        (VersionStatus.TRAINING, VersionStatus.CANDIDATE, True),
        (VersionStatus.TRAINING, VersionStatus.PRODUCTION, False),
        (VersionStatus.CANDIDATE, VersionStatus.CANARY, True),
        (VersionStatus.CANARY, VersionStatus.ROLLED_BACK, True),
        (VersionStatus.CANARY, VersionStatus.PRODUCTION, True),
        (VersionStatus.ROLLED_BACK, VersionStatus.PRODUCTION, False),
        (VersionStatus.PRODUCTION, VersionStatus.RETIRED, True),
        (VersionStatus.RETIRED, VersionStatus.CANARY, False),
    ],
)
def test_status_moves_follow_the_transition_table(tenant, start, target, allowed):
    version = _register(tenant, status=start)
    if allowed:
        assert (
            services.model_version_set_status(
                tenant=tenant, actor=SYSTEM, version_id=version.pk, status=target
            ).status
            == target
        )
    else:
        with pytest.raises(Conflict):
            services.model_version_set_status(
                tenant=tenant, actor=SYSTEM, version_id=version.pk, status=target
            )
        version.refresh_from_db()
        assert version.status == start


def test_alias_moves_are_kept_and_answer_what_an_alias_named_when(tenant, other_tenant):
    base = _register(tenant)
    child = _register(tenant, parent=base)
    services.alias_move(tenant=tenant, actor=SYSTEM, name="policy", alias="production", version=base)
    between = timezone.now()
    services.alias_move(
        tenant=tenant, actor=SYSTEM, name="policy", alias="production", version=child, reason="promoted"
    )
    services.alias_move(
        tenant=tenant, actor=SYSTEM, name="policy", alias="production", version=child
    )  # no-op
    assert selectors.alias_resolve(tenant=tenant, name="policy", alias="production") == child
    moves = list(selectors.alias_history(tenant=tenant, name="policy", alias="production"))
    assert [(move.from_version, move.to_version) for move in moves] == [(None, base), (base, child)]
    assert selectors.alias_at(tenant=tenant, name="policy", alias="production", moment=between) == base
    assert (
        selectors.alias_at(
            tenant=tenant, name="policy", alias="production", moment=moves[0].moved_at - timedelta(seconds=1)
        )
        is None
    )
    assert selectors.alias_resolve(tenant=other_tenant, name="policy", alias="production") is None
    assert AliasMove.objects.filter(tenant=other_tenant).count() == 0
    with pytest.raises(ValidationFailed):
        services.alias_move(
            tenant=other_tenant, actor=SYSTEM, name="policy", alias="production", version=child
        )


def test_another_tenants_version_is_not_found(tenant, other_tenant):
    theirs = _register(other_tenant)
    with pytest.raises(NotFound):
        selectors.model_version_get(tenant=tenant, version_id=theirs.pk)
