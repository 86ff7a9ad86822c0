"""Release state machine: every allowed and forbidden move, refusals with reasons, approval (409, 403, the
two-person rule), manual rollback, and the approval race on the database."""

import threading

import pytest
from django.db import connection

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.core.errors import Conflict, Forbidden, ValidationFailed
from apps.core.models import ImmutableRowError
from apps.releases.approval import release_approve
from apps.releases.models import RELEASE_TRANSITIONS, Release, ReleaseEvent, ReleaseStatus, ServingEvent
from apps.releases.services import release_create, release_rollback, release_transition
from apps.training.models import AliasMove, ModelVersion, VersionStatus
from apps.training.selectors import alias_resolve
from tests.releases.helpers import SYSTEM, register_versions, release_at

pytestmark = pytest.mark.django_db

PAIRS = [(source, target) for source in ReleaseStatus.values for target in ReleaseStatus.values]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s}->{t}" for s, t in PAIRS])
def test_every_transition_is_allowed_or_refused_by_the_table(source, target, tenant):
    release = release_at(tenant, source, stage_index=0 if source != ReleaseStatus.DRAFT else -1)
    events_before = ReleaseEvent.objects.count()
    if target in RELEASE_TRANSITIONS[source]:
        moved = release_transition(release=release, to=target, actor=SYSTEM, reason="test")
        assert moved.status == target
        assert ReleaseEvent.objects.filter(release=release, from_status=source, to_status=target).count() == 1
        assert AuditEvent.objects.filter(tenant=tenant, verb=f"release.{target}").exists()
    else:
        with pytest.raises(Conflict) as refused:
            release_transition(release=release, to=target, actor=SYSTEM)
        assert refused.value.code == "invalid_transition"
        release.refresh_from_db()
        assert release.status == source
        assert ReleaseEvent.objects.count() == events_before


def test_terminal_statuses_have_no_way_out():
    for status in (ReleaseStatus.PROMOTED, ReleaseStatus.ROLLED_BACK, ReleaseStatus.ABORTED):
        assert RELEASE_TRANSITIONS[status] == frozenset()
    assert set(RELEASE_TRANSITIONS) == set(ReleaseStatus.values)


def test_a_stale_copy_cannot_move_the_release(tenant):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0)
    stale = Release.objects.get(pk=release.pk)
    release_transition(release=release, to=ReleaseStatus.CANARY, actor=SYSTEM, stage_index=1)
    with pytest.raises(Conflict) as refused:
        release_transition(release=stale, to=ReleaseStatus.PAUSED, actor=SYSTEM)
    assert refused.value.code == "release_changed"


def test_refuses_a_version_still_training_or_with_another_tokenizer(tenant):
    _, training = register_versions(tenant, name="m-training", candidate_status=VersionStatus.TRAINING)
    with pytest.raises(Conflict) as refused:
        release_create(tenant=tenant, actor=SYSTEM, candidate_id=training.pk)
    assert refused.value.code == "version_training"
    assert "still training" in refused.value.message
    _, other = register_versions(tenant, name="m-tokenizer", candidate_tokenizer="tokenizer-b")
    with pytest.raises(ValidationFailed) as refused:
        release_create(tenant=tenant, actor=SYSTEM, candidate_id=other.pk)
    assert refused.value.code == "tokenizer_mismatch"
    assert "tokenizer differs" in refused.value.message
    assert not Release.objects.exists()


def test_bad_plans_and_a_second_active_release_are_refused(tenant):
    _, candidate = register_versions(tenant)
    with pytest.raises(ValidationFailed) as refused:
        release_create(
            tenant=tenant,
            actor=SYSTEM,
            candidate_id=candidate.pk,
            stages=[50, 25],
            guardrails=[{"metric": "happiness", "direction": "up", "threshold": -1}],
        )
    assert set(refused.value.fields) == {"stages", "guardrails[0]"}
    release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    with pytest.raises(Conflict) as refused:
        release_create(tenant=tenant, actor=SYSTEM, candidate_id=candidate.pk)
    assert refused.value.code == "release_active"


def test_approval_promotes_moves_the_alias_and_routing(tenant, member):
    operator = Actor.user(member("operator"))
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    promoted = release_approve(tenant=tenant, actor=operator, release_id=release.pk)
    assert promoted.status == ReleaseStatus.PROMOTED
    assert promoted.approved_by == operator.label
    assert alias_resolve(tenant=tenant, name=release.model, alias="production").pk == release.candidate_id
    assert ModelVersion.objects.get(pk=release.candidate_id).status == VersionStatus.PRODUCTION
    assert ModelVersion.objects.get(pk=release.baseline_id).status == VersionStatus.RETIRED
    history = ServingEvent.objects.get(release=release)
    assert history.stable_id == release.candidate_id
    assert history.canary is None


@pytest.mark.parametrize("status", [s for s in ReleaseStatus.values if s != ReleaseStatus.AWAITING_APPROVAL])
def test_approving_a_release_not_awaiting_approval_is_409_and_changes_nothing(status, tenant, member):
    release = release_at(tenant, status, stage_index=0)
    with pytest.raises(Conflict) as refused:
        release_approve(tenant=tenant, actor=Actor.user(member("operator")), release_id=release.pk)
    assert refused.value.status == 409
    release.refresh_from_db()
    assert release.status == status
    assert not AliasMove.objects.filter(to_version=release.candidate).exists()


def test_two_person_rule(tenant, member):
    tenant.policy.two_person_promotion = True
    tenant.policy.save()
    starter, other = Actor.user(member("operator")), Actor.user(member("operator"))
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3, started_by=starter)
    with pytest.raises(Forbidden) as refused:
        release_approve(tenant=tenant, actor=starter, release_id=release.pk)
    assert refused.value.code == "two_person_rule"
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL
    assert release_approve(tenant=tenant, actor=other, release_id=release.pk).status == ReleaseStatus.PROMOTED


def test_without_the_policy_the_starter_may_approve(tenant, member):
    starter = Actor.user(member("operator"))
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3, started_by=starter)
    assert (
        release_approve(tenant=tenant, actor=starter, release_id=release.pk).status == ReleaseStatus.PROMOTED
    )


@pytest.mark.parametrize(
    "status",
    [ReleaseStatus.EVALUATING, ReleaseStatus.CANARY, ReleaseStatus.PAUSED, ReleaseStatus.AWAITING_APPROVAL],
)
def test_manual_rollback_at_any_active_stage(status, tenant, member):
    release = release_at(tenant, status, stage_index=1)
    rolled = release_rollback(
        tenant=tenant, actor=Actor.user(member("operator")), release_id=release.pk, reason="looks off"
    )
    assert rolled.status == ReleaseStatus.ROLLED_BACK
    assert rolled.status_reason == "looks off"
    if status != ReleaseStatus.EVALUATING:
        assert ModelVersion.objects.get(pk=release.candidate_id).status == VersionStatus.ROLLED_BACK
        assert ServingEvent.objects.filter(release=release).last().stable_id == release.baseline_id


def test_history_rows_are_immutable(tenant):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    release_approve(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    event = ServingEvent.objects.get(release=release)
    event.reason = "rewritten"
    with pytest.raises(ImmutableRowError):
        event.save()
    with pytest.raises(ImmutableRowError):
        ServingEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with pytest.raises(ImmutableRowError):
        ReleaseEvent.objects.filter(release=release).delete()


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_approvals_make_exactly_one_transition(tenant, member):
    first, second = Actor.user(member("operator")), Actor.user(member("operator"))
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=3)
    barrier = threading.Barrier(2)
    outcomes = []

    def approve(actor):
        try:
            barrier.wait()
            release_approve(tenant=tenant, actor=actor, release_id=release.pk)
            outcomes.append("promoted")
        except Conflict as error:
            outcomes.append(error.status)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(actor,)) for actor in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes, key=str) == [409, "promoted"]
    assert ReleaseEvent.objects.filter(release=release, to_status=ReleaseStatus.PROMOTED).count() == 1
    assert AliasMove.objects.filter(to_version_id=release.candidate_id, alias="production").count() == 1
    assert AuditEvent.objects.filter(tenant=tenant, verb="release.promoted").count() == 1
