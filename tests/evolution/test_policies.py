"""Policies: every setting's range and shape refused with a field error, contradictions refused, optimistic
edits (a stale revision is 409 and changes nothing), audit and publication, and an edit that leaves a running
release alone."""

import pytest

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.evolution.decisions import decision_record, decision_start
from apps.evolution.models import Decision, DecisionKind, DecisionStatus, EvolutionPolicy
from apps.evolution.policies import policy_create, policy_delete, policy_update
from apps.releases.models import Release, ReleaseStatus
from tests.evaluation.factories import EvalSuiteFactory
from tests.evolution.factories import DecisionFactory
from tests.releases.helpers import release_at

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")
GUARDRAIL = {"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.1, "min_samples": 20}


def valid(**overrides) -> dict:
    """Settings of a policy that proposes weight updates gated on the weather environment."""
    return {
        "model": "policy-small",
        "mode": "propose",
        "signals": {
            "correction_rate": {"op": ">", "threshold": 0.2},
            "reward_mean": {"op": "<", "threshold": 0},
        },
        "update_kinds": ["weights"],
        "recipe": {"learning_rate": 1e-5, "samples_per_step": 8, "publish_every": 1, "evaluate_every": 2},
        "gate": {"environment": "weather", "cases": 20, "min_gain": 0.0},
        "release_plan": {"stages": [10, 50, 100], "stage_min_seconds": 60, "guardrails": [GUARDRAIL]},
        **overrides,
    }


def refused(tenant, **overrides) -> dict:
    with pytest.raises(ValidationFailed) as raised:
        policy_create(tenant=tenant, actor=ACTOR, **valid(**overrides))
    assert raised.value.code == "invalid_policy"
    assert not EvolutionPolicy.objects.exists()
    return raised.value.fields


def test_a_valid_policy_is_created_audited_and_published(tenant, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    assert policy.revision == 1
    assert policy.mode == "propose"
    assert policy.window_seconds == 600
    assert policy.gate["environment"] == "weather"
    event = AuditEvent.objects.get(verb="evolution_policy.create")
    assert event.target_id == str(policy.pk)
    assert event.data["settings"]["model"] == "policy-small"
    assert len(callbacks) == 1  # the publication on the evolution stream, after commit


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"model": ""}, "model"),
        ({"agent_name": "x" * 201}, "agent_name"),
        ({"mode": "yolo"}, "mode"),
        ({"approval_mode": "nobody"}, "approval_mode"),
        ({"enabled": "yes"}, "enabled"),
        ({"window_seconds": 59}, "window_seconds"),
        ({"window_seconds": 86_401}, "window_seconds"),
        ({"window_seconds": "600"}, "window_seconds"),
        ({"cooldown_seconds": 86_401}, "cooldown_seconds"),
        ({"cooldown_seconds": -1}, "cooldown_seconds"),
        ({"decision_ttl_seconds": 10}, "decision_ttl_seconds"),
        ({"compute_budget_seconds": 10**6}, "compute_budget_seconds"),
        ({"signals": []}, "signals"),
        ({"signals": {"happiness": {"op": ">", "threshold": 1}}}, "signals.happiness"),
        ({"signals": {"reward_mean": {"op": ">=", "threshold": 1}}}, "signals.reward_mean"),
        ({"signals": {"reward_mean": {"op": ">", "threshold": "high"}}}, "signals.reward_mean"),
        ({"signals": {"reward_mean": {"op": ">", "threshold": float("nan")}}}, "signals.reward_mean"),
        ({"signals": {"reward_mean": {"op": ">", "threshold": True}}}, "signals.reward_mean"),
        ({"signals": {"correction_rate": {"op": ">", "threshold": 1.5}}}, "signals.correction_rate"),
        ({"signals": {"drift_js": {"op": ">", "threshold": -0.1}}}, "signals.drift_js"),
        ({"signals": {"latency_p95_ms": {"op": ">", "threshold": -5}}}, "signals.latency_p95_ms"),
        ({"signals": {"reward_mean": {"op": ">", "threshold": 1, "extra": 1}}}, "signals.reward_mean"),
        ({"update_kinds": ["weights", "prompt"]}, "update_kinds"),
        ({"update_kinds": ["weights", "weights"]}, "update_kinds"),
        ({"update_kinds": "weights"}, "update_kinds"),
        ({"update_kinds": []}, "update_kinds"),
        ({"recipe": []}, "recipe"),
        ({"recipe": {"learning_rate": 0}}, "recipe.learning_rate"),
        ({"recipe": {"learning_rate": 2}}, "recipe.learning_rate"),
        ({"recipe": {"samples_per_step": 0}}, "recipe.samples_per_step"),
        ({"recipe": {"samples_per_step": 1025}}, "recipe.samples_per_step"),
        ({"recipe": {"publish_every": 0}}, "recipe.publish_every"),
        ({"recipe": {"staleness_bound": -1}}, "recipe.staleness_bound"),
        ({"recipe": {"rollout_bound": -1}}, "recipe.rollout_bound"),
        ({"recipe": {"evaluate_every": 0}}, "recipe.evaluate_every"),
        ({"recipe": {"temperature_of_the_room": 3}}, "recipe"),
        ({"recipe": {"algorithm": "magic"}}, "recipe"),
        ({"gate": {}}, "gate"),
        ({"gate": {"environment": "weather", "suite_id": 1, "cases": 5}}, "gate.environment"),
        ({"gate": {"cases": 5}}, "gate.environment"),
        ({"gate": {"environment": "chess", "cases": 5}}, "gate.environment"),
        ({"gate": {"environment": "weather"}}, "gate.cases"),
        ({"gate": {"environment": "weather", "cases": 0}}, "gate.cases"),
        ({"gate": {"environment": "weather", "cases": 1001}}, "gate.cases"),
        ({"gate": {"environment": "weather", "cases": 5, "min_gain": 1.5}}, "gate.min_gain"),
        ({"gate": {"environment": "weather", "cases": 5, "seed": -1}}, "gate.seed"),
        ({"gate": {"environment": "weather", "cases": 5, "why": 1}}, "gate"),
        ({"gate": {"suite_id": 999_999}}, "gate.suite_id"),
        (
            {"gate": {"environment": "weather", "cases": 5, "safety_suite_id": 999_999}},
            "gate.safety_suite_id",
        ),
        ({"release_plan": []}, "release_plan"),
        ({"release_plan": {"stages": [50, 10]}}, "release_plan.stages"),
        ({"release_plan": {"stages": [0, 100]}}, "release_plan.stages"),
        ({"release_plan": {"guardrails": [{"metric": "vibes"}]}}, "release_plan.guardrails[0]"),
        ({"release_plan": {"failure_limit": -1}}, "release_plan.failure_limit"),
        ({"release_plan": {"stage_min_seconds": "soon"}}, "release_plan.stage_min_seconds"),
        ({"release_plan": {"canary": True}}, "release_plan"),
    ],
)
def test_each_bad_setting_is_refused_with_its_field(tenant, overrides, field):
    fields = refused(tenant, **overrides)
    assert field in fields, fields


def test_a_suite_of_another_tenant_is_refused_and_one_of_this_tenant_accepted(tenant, other_tenant):
    theirs, ours = EvalSuiteFactory(tenant=other_tenant), EvalSuiteFactory(tenant=tenant)
    assert "gate.suite_id" in refused(tenant, gate={"suite_id": theirs.pk})
    assert "gate.safety_suite_id" in refused(tenant, gate={"suite_id": ours.pk, "safety_suite_id": theirs.pk})
    policy = policy_create(
        tenant=tenant,
        actor=ACTOR,
        **valid(gate={"suite_id": ours.pk, "safety_suite_id": ours.pk, "min_gain": -0.5}),
    )
    assert policy.gate["suite_id"] == ours.pk


def test_an_unknown_setting_is_refused(tenant):
    with pytest.raises(ValidationFailed) as raised:
        policy_create(tenant=tenant, actor=ACTOR, **valid(), revision=7)
    assert raised.value.fields == {"revision": ["not a policy setting"]}


def test_observe_mode_needs_no_update_kind_and_no_gate(tenant):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid(mode="observe", update_kinds=[], gate={}))
    assert policy.update_kinds == []
    assert policy.gate == {}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"mode": "propose", "approval_mode": "automatic"}, "approval_mode"),
        (
            {"mode": "auto", "update_kinds": ["weights"], "compute_budget_seconds": 0},
            "compute_budget_seconds",
        ),
        (
            {
                "mode": "auto",
                "approval_mode": "automatic",
                "release_plan": {"stages": [100], "guardrails": [GUARDRAIL]},
            },
            "release_plan.stages",
        ),
        (
            {"mode": "auto", "approval_mode": "automatic", "release_plan": {"stages": [5, 100]}},
            "release_plan.guardrails",
        ),
    ],
)
def test_contradictions_are_refused(tenant, overrides, field):
    assert field in refused(tenant, **overrides)


def test_settings_that_look_close_to_contradictions_are_accepted(tenant):
    observing = policy_create(
        tenant=tenant,
        actor=ACTOR,
        **valid(model="watched", mode="observe", approval_mode="automatic", release_plan={"stages": [100]}),
    )
    assert observing.approval_mode == "automatic"  # nothing is released in observe mode
    harness_only = policy_create(
        tenant=tenant,
        actor=ACTOR,
        **valid(mode="auto", update_kinds=["harness"], compute_budget_seconds=0, approval_mode="two_person"),
    )
    held = policy_create(
        tenant=tenant,
        actor=ACTOR,
        **valid(
            model="other",
            mode="auto",
            approval_mode="automatic",
            release_plan={"stages": [100], "stage_min_seconds": 600, "guardrails": [GUARDRAIL]},
        ),
    )
    assert harness_only.compute_budget_seconds == 0
    assert held.release_plan["stages"] == [100]


def test_one_policy_per_model_and_agent(tenant, other_tenant):
    policy_create(tenant=tenant, actor=ACTOR, **valid())
    with pytest.raises(Conflict) as raised:
        policy_create(tenant=tenant, actor=ACTOR, **valid())
    assert raised.value.code == "policy_exists"
    policy_create(tenant=tenant, actor=ACTOR, **valid(agent_name="support-bot"))
    policy_create(tenant=other_tenant, actor=ACTOR, **valid())  # another tenant's namespace
    assert EvolutionPolicy.objects.count() == 3


def test_an_edit_bumps_the_revision_and_audits_what_changed(tenant, django_capture_on_commit_callbacks):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    with django_capture_on_commit_callbacks() as callbacks:
        edited = policy_update(
            tenant=tenant, actor=Actor.system("editor"), policy_id=policy.pk, revision=1, window_seconds=900
        )
    assert edited.revision == 2
    assert edited.window_seconds == 900
    assert edited.updated_by == "editor"
    event = AuditEvent.objects.get(verb="evolution_policy.update")
    assert event.data == {"revision": 2, "changed": {"window_seconds": 900}}
    assert len(callbacks) == 1


def test_a_stale_revision_is_a_conflict_and_changes_nothing(tenant):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    policy_update(tenant=tenant, actor=ACTOR, policy_id=policy.pk, revision=1, mode="observe")
    with pytest.raises(Conflict) as raised:
        policy_update(tenant=tenant, actor=ACTOR, policy_id=policy.pk, revision=1, window_seconds=120)
    assert raised.value.code == "policy_stale"
    policy.refresh_from_db()
    assert policy.revision == 2
    assert policy.window_seconds == 600
    assert policy.mode == "observe"
    assert AuditEvent.objects.filter(verb="evolution_policy.update").count() == 1


def test_an_invalid_edit_changes_nothing(tenant):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    with pytest.raises(ValidationFailed) as raised:
        policy_update(tenant=tenant, actor=ACTOR, policy_id=policy.pk, revision=1, approval_mode="automatic")
    assert "approval_mode" in raised.value.fields
    policy.refresh_from_db()
    assert policy.revision == 1
    assert policy.approval_mode == "one_operator"


def test_another_tenants_policy_cannot_be_edited_or_deleted(tenant, other_tenant):
    theirs = policy_create(tenant=other_tenant, actor=ACTOR, **valid())
    with pytest.raises(NotFound):
        policy_update(tenant=tenant, actor=ACTOR, policy_id=theirs.pk, revision=1, mode="observe")
    with pytest.raises(NotFound):
        policy_delete(tenant=tenant, actor=ACTOR, policy_id=theirs.pk)
    theirs.refresh_from_db()
    assert theirs.mode == "propose"


def test_editing_a_policy_leaves_its_running_release_alone(tenant):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    release = release_at(
        tenant, ReleaseStatus.CANARY, stage_index=0, stages=[10, 50, 100], guardrails=[GUARDRAIL]
    )
    decision = decision_record(
        tenant=tenant,
        policy=policy,
        kind=DecisionKind.RELEASE,
        reason="gate passed",
        actor=ACTOR,
        status="approved",
    )
    decision_start(tenant=tenant, decision_id=decision.pk, started={"releases": [release.pk]})

    policy_update(
        tenant=tenant,
        actor=ACTOR,
        policy_id=policy.pk,
        revision=1,
        release_plan={
            "stages": [50, 100],
            "guardrails": [{**GUARDRAIL, "threshold": 0.5}],
            "failure_limit": 2,
        },
    )

    release.refresh_from_db()
    decision.refresh_from_db()
    assert release.status == ReleaseStatus.CANARY
    assert release.stages == [10, 50, 100]
    assert release.guardrails[0]["threshold"] == 0.1
    assert release.failure_limit == 0
    assert decision.status == DecisionStatus.RUNNING
    assert decision.policy_revision == 1
    assert decision.started == {"releases": [release.pk]}
    assert Release.objects.count() == 1


def test_delete_is_audited_and_refused_while_a_decision_runs(tenant):
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid())
    running = DecisionFactory(policy=policy, status=DecisionStatus.RUNNING)
    with pytest.raises(Conflict) as raised:
        policy_delete(tenant=tenant, actor=ACTOR, policy_id=policy.pk)
    assert raised.value.code == "policy_busy"
    Decision.objects.filter(pk=running.pk).update(status=DecisionStatus.SUCCEEDED)
    with pytest.raises(Conflict):
        policy_delete(tenant=tenant, actor=ACTOR, policy_id=policy.pk, revision=5)
    policy_delete(tenant=tenant, actor=ACTOR, policy_id=policy.pk, revision=1)
    assert not EvolutionPolicy.objects.exists()
    assert not Decision.objects.exists()
    assert AuditEvent.objects.get(verb="evolution_policy.delete").target_id == str(policy.pk)


def test_a_bfcl_gate_names_single_turn_non_live_categories(tenant):
    gate = {
        "environment": "bfcl",
        "categories": ["simple_python", "irrelevance"],
        "cases": 10,
        "min_gain": 0.0,
    }
    for categories in (["live_simple"], ["multi_turn_base"], "simple_python", []):
        problems = refused(tenant, gate={**gate, "categories": categories})
        assert list(problems) == ["gate.categories"], categories
    problems = refused(tenant, gate={"environment": "weather", "cases": 5, "categories": ["simple_python"]})
    assert problems == {"gate.categories": ["categories belong to a bfcl gate"]}
    policy = policy_create(tenant=tenant, actor=ACTOR, **valid(gate=gate))
    assert policy.gate["categories"] == ["simple_python", "irrelevance"]
