"""The actions behind decisions: the gate (an environment's held-out cases, or an eval suite), releases of
weights and harness candidates, promotion, rollback and pausing, and the tasks that run them."""

import pytest

from apps.audit.services import Actor
from apps.evaluation.models import EvalRun, RunStatus
from apps.evolution.decisions import decision_approve, decision_record
from apps.evolution.models import Decision, DecisionStatus
from apps.evolution.selectors import gate_key
from apps.evolution.tasks import evaluate
from apps.loop.control import evolution_tick, evolution_tick_all
from apps.releases.models import ReleaseStatus
from apps.releases.services import release_abort
from apps.training.models import ModelVersion, OnlineRun, OnlineRunStatus, VersionStatus
from apps.training.online import online_run_finish, online_run_record_step, online_run_start
from tests.evaluation.factories import EvalCaseFactory, EvalSuiteFactory
from tests.evolution.factories import AutoPolicyFactory
from tests.evolution.helpers import CALM, SYSTEM, candidate, production
from tests.releases.helpers import MODEL, release_at, serve_versions
from tests.tenants.factories import UserFactory
from tests.training.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db
SAFETY = {"safety_flags": {"op": ">", "threshold": 0.0}}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from workers.inference.modelgen import create_default_model

    return create_default_model(tmp_path_factory.mktemp("evolution-model"), seed=0)


def _learning(tenant, policy, *, checkpoint="/models/base", versions=2):
    """Production v0 and a learner from it that has published `versions` versions."""
    base = production(tenant, policy, checkpoint=checkpoint)
    run = online_run_start(tenant=tenant, actor=SYSTEM, base_version=base, publish_to_backends=False)
    newest = base
    for _ in range(versions):
        newest = candidate(tenant, newest, checkpoint=checkpoint)
        online_run_record_step(run_id=run.pk, version=newest)
    return base, run, newest


def _only(policy, kind):
    (decision,) = Decision.objects.filter(policy=policy, kind=kind)
    return decision


def test_the_environment_gate_runs_on_the_threads_it_is_given_and_gives_them_back(
    tenant, model_dir, settings, monkeypatch
):
    import torch

    from apps.loop.actions import gate_measure
    from workers.envs import warmup

    seen = []
    measure = warmup.heldout_success

    def watched(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return measure(*args, **kwargs)

    monkeypatch.setattr(warmup, "heldout_success", watched)
    settings.AREAL_GATE_THREADS = 1
    policy = AutoPolicyFactory(tenant=tenant, gate={"environment": "weather", "cases": 2, "seed": 0})
    base = production(tenant, policy, checkpoint=model_dir)
    before = torch.get_num_threads()
    score = gate_measure(tenant=tenant, version=base, gate=policy.gate)
    assert 0.0 <= score <= 1.0
    assert seen == [1]
    assert torch.get_num_threads() == before  # the worker's next task gets torch's threads back


@pytest.mark.parametrize(("min_gain", "child"), [(-0.05, "release"), (0.5, "restart_learner")])
def test_the_environment_gate_measures_on_the_eval_queue_and_decides_the_next_step(
    tenant, model_dir, min_gain, child
):
    gate = {"environment": "weather", "cases": 2, "seed": 0, "min_gain": min_gain}
    policy = AutoPolicyFactory(tenant=tenant, gate=gate)
    base, _, newest = _learning(tenant, policy, checkpoint=model_dir)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = _only(policy, "evaluate")
    assert decision.status == DecisionStatus.RUNNING
    assert decision.version == newest
    assert decision.started["versions"] == [newest.pk, base.pk]  # production has no score of this gate yet
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)  # the worker has not measured yet: it waits
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.RUNNING
    scores = evaluate(tenant.pk, decision.pk)  # what the eval worker runs (evolution.evaluate)
    assert set(scores) == {newest.number, base.number}
    newest.refresh_from_db()
    entry = newest.metrics["gate"][gate_key(gate)]
    assert entry["cases"] == 2
    assert newest.metrics["heldout"]["success"] == entry["score"]
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert decision.evidence["gate_score"] == entry["score"]
    assert decision.evidence["min_gain"] == min_gain
    assert decision.evidence["passed"] is (child == "release")
    follow = _only(policy, child)
    assert follow.parent == decision
    if child == "release":  # no backend serves the model here: refused with the reason
        assert follow.status == DecisionStatus.FAILED
        assert "no serving slot is free" in follow.outcome
    else:  # the learner is asked to stop, and starts again from production once it did
        assert follow.status == DecisionStatus.RUNNING


def test_the_suite_gate_compares_with_productions_run(tenant):
    suite = EvalSuiteFactory(tenant=tenant)
    EvalCaseFactory(suite=suite)
    policy = AutoPolicyFactory(tenant=tenant, gate={"suite_id": suite.pk, "min_gain": 0.1})
    base, _, newest = _learning(tenant, policy)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = _only(policy, "evaluate")
    runs = EvalRun.objects.filter(pk__in=decision.started["eval_runs"])
    assert {run.model_version for run in runs} == {newest, base}
    for run in runs:  # as the eval worker leaves them
        score = 0.9 if run.model_version == newest else 0.7
        EvalRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, summary={"score": score})
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert decision.evidence["gate_score"] == 0.9
    assert decision.evidence["best_production_score"] == 0.7
    assert decision.evidence["passed"] is True
    assert _only(policy, "release").parent == decision


def test_a_harness_candidate_is_released_on_the_backends_of_its_weights(tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    base = production(tenant, policy)
    harness_only = ModelVersionFactory(
        tenant=tenant, name=policy.model, number=1, status=VersionStatus.CANDIDATE, weights_of=base
    )
    serve_versions(tenant, base)  # production's backend serves the harness version's weights
    decision = decision_record(
        tenant=tenant, policy=policy, kind="release", reason="test", actor=SYSTEM, version=harness_only
    )
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.RUNNING
    (release_id,) = decision.started["releases"]
    from apps.releases.selectors import release_get

    release = release_get(tenant=tenant, release_id=release_id)
    assert (release.candidate, release.baseline, release.status) == (harness_only, base, "evaluating")
    assert release.stages == [50]
    assert release.created_by == f"evolution policy {policy.pk}"
    release_abort(tenant=tenant, actor=SYSTEM, release_id=release.pk, reason="test")
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.FAILED
    assert "aborted" in decision.outcome


def test_automatic_approval_promotes_a_release_awaiting_approval(tenant):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = _only(policy, "promote")
    assert decision.status == DecisionStatus.SUCCEEDED
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    assert release.approved_by == f"evolution policy {policy.pk}"


def test_one_operator_approval_promotes_as_the_operator(tenant):
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL, approval_mode="one_operator")
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = _only(policy, "promote")
    assert decision.status == DecisionStatus.PROPOSED
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL
    operator = UserFactory()
    decision_approve(tenant=tenant, actor=Actor.user(operator), decision_id=decision.pk)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    assert release.approved_by == operator.username


def test_a_safety_signal_rolls_the_release_under_way_back(tenant):
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL, signals=SAFETY)
    evolution_tick(tenant=tenant, policy=policy, signals={"safety_flags": 3})
    decision = _only(policy, "rollback")
    assert decision.status == DecisionStatus.SUCCEEDED
    assert decision.evidence["signals"]["safety_flags"]["value"] == 3
    release.refresh_from_db()
    assert release.status == ReleaseStatus.ROLLED_BACK


def test_a_safety_signal_after_a_release_pauses_learning(tenant):
    policy = AutoPolicyFactory(tenant=tenant, signals=SAFETY)
    _, run, _ = _learning(tenant, policy, versions=0)
    evolution_tick(tenant=tenant, policy=policy, signals={"safety_flags": 1})
    decision = _only(policy, "pause_learning")
    assert decision.status == DecisionStatus.RUNNING
    run.refresh_from_db()
    assert run.stop_requested
    online_run_finish(run_id=run.pk, status=OnlineRunStatus.STOPPED)
    evolution_tick(tenant=tenant, policy=policy, signals={"safety_flags": 0})
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.SUCCEEDED
    assert not OnlineRun.objects.filter(tenant=tenant, status=OnlineRunStatus.RUNNING).exists()


def test_the_beat_ticks_every_enabled_policy_and_the_tasks_have_queues(tenant, other_tenant, settings):
    from areal_web.celery import app
    from areal_web.queues import TASK_QUEUES, Queue

    assert TASK_QUEUES["evolution.tick"] == Queue.DEFAULT
    assert TASK_QUEUES["evolution.evaluate"] == Queue.EVAL
    assert {"evolution.tick", "evolution.evaluate"} <= set(app.tasks.keys())
    assert settings.CELERY_BEAT_SCHEDULE["evolution-tick"]["task"] == "evolution.tick"
    ticking = [
        AutoPolicyFactory(tenant=tenant),
        AutoPolicyFactory(tenant=other_tenant, mode="observe"),
    ]
    resting = AutoPolicyFactory(tenant=tenant, enabled=False)
    assert evolution_tick_all() == 2
    for policy in ticking:
        policy.refresh_from_db()
        assert policy.last_tick_at is not None
    resting.refresh_from_db()
    assert resting.last_tick_at is None
    assert not ModelVersion.objects.exists()


def test_a_promotion_waiting_while_a_person_promoted_the_release_in_the_console_is_closed(tenant):
    from apps.releases.approval import release_approve

    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    policy = AutoPolicyFactory(tenant=tenant, model=MODEL, approval_mode="one_operator")
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    operator = UserFactory()
    release_approve(tenant=tenant, actor=Actor.user(operator), release_id=release.pk)
    evolution_tick(tenant=tenant, policy=policy, signals=CALM)
    decision = _only(policy, "promote")
    assert decision.status == DecisionStatus.SUCCEEDED  # what it proposed happened, on the release's page
    assert decision.outcome.startswith(
        f"the release of v{release.candidate.number} over v{release.baseline.number} was promoted by {operator.username}"
    )
