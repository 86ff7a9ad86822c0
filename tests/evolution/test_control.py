"""evolution_tick: signals → rules → decisions (by mode and approval mode) → actions, on the database."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.services import Actor
from apps.core.errors import Conflict, NotFound
from apps.evolution.decisions import decision_approve, decision_record, decision_reject
from apps.evolution.models import Decision, DecisionStatus
from apps.evolution.policies import policy_update
from apps.loop.control import evolution_tick
from apps.releases.models import ReleaseStatus
from apps.training.models import OnlineRun, OnlineRunStatus
from apps.training.online import online_run_finish, online_run_start
from tests.evolution.factories import AutoPolicyFactory
from tests.evolution.helpers import CALM, FIRED, SYSTEM, candidate, production
from tests.releases.factories import ReleaseFactory
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db


def _decisions(policy, kind=None):
    rows = Decision.objects.filter(policy=policy).order_by("id")
    return list(rows.filter(kind=kind) if kind else rows)


def test_stationary_signals_record_nothing(tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    production(tenant, policy)
    result = evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    assert result.recorded == []
    assert _decisions(policy) == []
    policy.refresh_from_db()
    assert policy.last_tick_at is not None


def test_auto_mode_a_fired_signal_trains_from_production_at_once(tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    base = production(tenant, policy)
    result = evolution_tick(tenant=tenant, policy=policy, signals=FIRED)
    (decision,) = result.recorded
    decision.refresh_from_db()
    assert decision.kind == "train"
    assert decision.status == DecisionStatus.SUCCEEDED
    assert decision.evidence["signals"]["drift_js"] == {"value": 0.5, "op": ">", "threshold": 0.2}
    run = OnlineRun.objects.get(tenant=tenant)
    assert decision.started == {"online_runs": [run.pk]}
    assert run.base_version == base
    assert run.publish_to_backends is False
    assert (run.samples_per_step, run.staleness_bound) == (4, 4)
    assert run.config["learning_rate"] == 1e-4
    assert run.created_by == f"evolution policy {policy.pk}"
    # The learner runs: the same signal trains no second one.
    assert evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded == []
    assert OnlineRun.objects.filter(tenant=tenant).count() == 1


def test_the_recipe_s_rollout_bound_paces_the_learner_apart_from_eta(tenant):
    policy = AutoPolicyFactory(
        tenant=tenant,
        recipe={"learning_rate": 1e-4, "samples_per_step": 4, "staleness_bound": 8, "rollout_bound": 1},
    )
    production(tenant, policy)
    evolution_tick(tenant=tenant, policy=policy, signals=FIRED)
    run = OnlineRun.objects.get(tenant=tenant)
    assert (run.staleness_bound, run.rollout_bound) == (8, 1)
    assert "rollout_bound" not in run.config  # a run setting, not a hyperparameter of the engine


def test_observe_mode_records_no_decision(tenant):
    policy = AutoPolicyFactory(tenant=tenant, mode="observe")
    production(tenant, policy)
    result = evolution_tick(tenant=tenant, policy=policy, signals=FIRED)
    assert result.signals == FIRED
    assert _decisions(policy) == []
    assert not OnlineRun.objects.filter(tenant=tenant).exists()


def test_propose_mode_waits_for_a_person_and_starts_on_the_next_tick(tenant):
    policy = AutoPolicyFactory(tenant=tenant, mode="propose", approval_mode="one_operator")
    production(tenant, policy)
    (decision,) = evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded
    assert decision.status == DecisionStatus.PROPOSED
    assert decision.expires_at is not None
    assert not OnlineRun.objects.filter(tenant=tenant).exists()
    # Waiting: not proposed again.
    assert evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded == []
    operator = UserFactory()
    decision_approve(tenant=tenant, actor=Actor.user(operator), decision_id=decision.pk)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert OnlineRun.objects.filter(tenant=tenant, status=OnlineRunStatus.RUNNING).count() == 1


def test_two_person_approval_needs_two_different_people(tenant):
    policy = AutoPolicyFactory(tenant=tenant, mode="propose", approval_mode="two_person")
    production(tenant, policy)
    (decision,) = evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded
    first, second = UserFactory(), UserFactory()
    decision_approve(tenant=tenant, actor=Actor.user(first), decision_id=decision.pk)
    with pytest.raises(Conflict):
        decision_approve(tenant=tenant, actor=Actor.user(first), decision_id=decision.pk)
    evolution_tick(tenant=tenant, policy=policy, signals=FIRED)
    assert not OnlineRun.objects.filter(tenant=tenant).exists()  # one approval of two: still waiting
    decision_approve(tenant=tenant, actor=Actor.user(second), decision_id=decision.pk)
    evolution_tick(tenant=tenant, policy=policy, signals=FIRED)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert OnlineRun.objects.filter(tenant=tenant).count() == 1


def test_a_rejected_proposal_starts_nothing_and_the_cool_down_holds_the_next_back(tenant):
    policy = AutoPolicyFactory(tenant=tenant, mode="propose", approval_mode="one_operator")
    production(tenant, policy)
    (decision,) = evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded
    decision_reject(tenant=tenant, actor=Actor.user(UserFactory()), decision_id=decision.pk, reason="not now")
    (held,) = evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded
    assert held.kind == "nothing"
    assert held.status == DecisionStatus.SUCCEEDED
    assert held.evidence["held_back_by"] == "cooldown"
    # Said once, not on every tick.
    assert evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded == []
    assert not OnlineRun.objects.filter(tenant=tenant).exists()


def test_an_unapproved_proposal_expires(tenant):
    policy = AutoPolicyFactory(
        tenant=tenant, mode="propose", approval_mode="one_operator", decision_ttl_seconds=60
    )
    production(tenant, policy)
    (decision,) = evolution_tick(tenant=tenant, policy=policy, signals=FIRED).recorded
    later = timezone.now() + timedelta(seconds=61)
    result = evolution_tick(tenant=tenant, policy=policy, signals=CALM, now=later)
    assert result.expired == 1
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.EXPIRED
    assert not OnlineRun.objects.filter(tenant=tenant).exists()


def _learner(tenant, base):
    return online_run_start(tenant=tenant, actor=SYSTEM, base_version=base, publish_to_backends=False)


def _release_decision(tenant, policy, release, *, status=DecisionStatus.RUNNING):
    decision = decision_record(
        tenant=tenant, policy=policy, kind="release", reason="test", actor=SYSTEM, version=release.candidate
    )
    Decision.objects.filter(pk=decision.pk).update(status=status, started={"releases": [release.pk]})
    decision.refresh_from_db()
    return decision


def test_a_rolled_back_release_restarts_the_learner_from_production(tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    base = production(tenant, policy)
    first = _learner(tenant, base)
    release = ReleaseFactory(
        tenant=tenant,
        model=policy.model,
        baseline=base,
        candidate=candidate(tenant, base),
        status=ReleaseStatus.ROLLED_BACK,
    )
    parent = _release_decision(tenant, policy, release)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    parent.refresh_from_db()
    assert parent.status == DecisionStatus.FAILED  # the release decision ends with its release
    assert "rolled back" in parent.outcome
    (restart,) = _decisions(policy, "restart_learner")
    assert restart.evidence["release"] == release.pk
    assert restart.status == DecisionStatus.RUNNING  # the learner was asked to stop; it has not yet
    first.refresh_from_db()
    assert first.stop_requested
    online_run_finish(run_id=first.pk, status=OnlineRunStatus.STOPPED)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    restart.refresh_from_db()
    assert restart.status == DecisionStatus.SUCCEEDED
    second = OnlineRun.objects.get(tenant=tenant, status=OnlineRunStatus.RUNNING)
    assert second.base_version == base
    assert restart.started["online_runs"] == [first.pk, second.pk]
    # Answered once: the same rollback does not restart it again.
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    assert len(_decisions(policy, "restart_learner")) == 1


def test_a_policy_edit_while_a_release_runs_leaves_the_release_untouched(tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    base = production(tenant, policy)
    release = ReleaseFactory(
        tenant=tenant, model=policy.model, baseline=base, candidate=candidate(tenant, base), status="canary"
    )
    decision = _release_decision(tenant, policy, release)
    stages = list(release.stages)
    policy = policy_update(
        tenant=tenant,
        actor=SYSTEM,
        policy_id=policy.pk,
        revision=policy.revision,
        release_plan={"stages": [10, 20, 100], "stage_min_seconds": 30},
        mode="propose",
        approval_mode="one_operator",
    )
    assert policy.revision == 2
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    release.refresh_from_db()
    decision.refresh_from_db()
    assert release.status == ReleaseStatus.CANARY
    assert release.stages == stages
    assert decision.status == DecisionStatus.RUNNING
    assert decision.policy_revision == 1


def test_ticks_stay_in_their_tenant(tenant, other_tenant):
    ours = AutoPolicyFactory(tenant=tenant)
    theirs = AutoPolicyFactory(tenant=other_tenant)
    production(tenant, ours)
    production(other_tenant, theirs)
    evolution_tick(tenant=tenant, policy=ours, signals=FIRED)
    assert _decisions(theirs) == []
    assert not OnlineRun.objects.filter(tenant=other_tenant).exists()
    with pytest.raises(NotFound):
        evolution_tick(tenant=tenant, policy=theirs, signals=FIRED)
    assert _decisions(theirs) == []


def test_not_found_error_is_the_domain_one_for_decisions_of_another_tenant(tenant, other_tenant):
    theirs = AutoPolicyFactory(tenant=other_tenant)
    decision = decision_record(tenant=other_tenant, policy=theirs, kind="train", reason="x", actor=SYSTEM)
    with pytest.raises(NotFound):
        decision_approve(tenant=tenant, actor=Actor.user(UserFactory()), decision_id=decision.pk)
