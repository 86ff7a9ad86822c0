"""The evolution pages: an operator sees policies, a policy's charts, timeline (evidence, links to what
decisions started, approve / reject) and clusters, and edits the settings with field errors shown; a viewer
sees it all without a button and cannot approve; an annotator cannot open it; another tenant's are 404."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.evolution.models import DecisionStatus, EvolutionPolicy
from apps.tenants.permissions import Role
from tests.evolution.factories import (
    DecisionFactory,
    EvolutionPolicyFactory,
    SignalPointFactory,
    ToolFailureClusterFactory,
)

pytestmark = pytest.mark.django_db
TRAJECTORY = "6f1b3c2a-0000-4000-8000-000000000001"


def _client(user, tenant=None):
    client = Client()
    client.force_login(user)
    return client


def _form(policy, **overrides) -> dict:
    data = {
        "model": policy.model,
        "agent_name": policy.agent_name,
        "mode": policy.mode,
        "enabled": "on",
        "window_seconds": policy.window_seconds,
        "signal-0-name": "correction_rate",
        "signal-0-op": ">",
        "signal-0-threshold": 0.2,
        "signal-1-name": "",
        "update_kinds": [],
        "guardrail-0-metric": "",
        "approval_mode": policy.approval_mode,
        "cooldown_seconds": policy.cooldown_seconds,
        "compute_budget_seconds": policy.compute_budget_seconds,
        "decision_ttl_seconds": policy.decision_ttl_seconds,
        "revision": policy.revision,
    }
    return {**data, **overrides}


@pytest.fixture
def world(tenant):
    policy = EvolutionPolicyFactory(tenant=tenant, model="policy-small")
    SignalPointFactory(policy=policy, name="correction_rate", value=0.31)
    cluster = ToolFailureClusterFactory(policy=policy, examples=[TRAJECTORY])
    decision = DecisionFactory(
        policy=policy,
        evidence={
            "signals": [{"name": "correction_rate", "value": 0.31, "op": ">", "threshold": 0.2}],
            "trajectories": [TRAJECTORY],
            "clusters": [cluster.pk],
        },
    )
    started = DecisionFactory(
        policy=policy,
        status=DecisionStatus.RUNNING,
        reason="gate passed",
        started={"releases": [41], "online_runs": [7], "eval_runs": [9]},
    )
    return policy, decision, started, cluster


def test_operator_sees_policies_charts_timeline_and_clusters(member, world):
    policy, decision, started, cluster = world
    client = _client(member(Role.OPERATOR))
    home = client.get("/evolution/").content.decode()
    assert f'href="/evolution/policies/{policy.pk}/"' in home
    assert ">Evolution</a>" in home  # the navigation link
    response = client.get(f"/evolution/policies/{policy.pk}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="chart-correction_rate"' in page
    assert f'data-decision="{decision.pk}"' in page
    assert "0.31" in page  # the signal's value against its threshold
    assert f'href="/trajectories/{TRAJECTORY}/"' in page
    assert f'href="#cluster-{cluster.pk}"' in page
    assert f'id="cluster-{cluster.pk}"' in page
    assert 'href="/releases/41/"' in page
    assert 'href="/evaluation/runs/9/"' in page
    assert "#online-7" in page
    assert f'action="/evolution/decisions/{decision.pk}/approve/"' in page
    assert f'action="/evolution/decisions/{started.pk}/approve/"' not in page  # only proposals
    assert 'id="policy-form"' in page


def test_viewer_sees_the_page_without_buttons_and_cannot_approve(member, world):
    policy, decision, _, _ = world
    client = _client(member(Role.VIEWER))
    page = client.get(f"/evolution/policies/{policy.pk}/").content.decode()
    assert f'data-decision="{decision.pk}"' in page
    assert "decision-actions" not in page
    assert 'action="/evolution/decisions/' not in page
    assert 'id="policy-form"' not in page
    assert client.post(f"/evolution/decisions/{decision.pk}/approve/").status_code == 403
    assert client.post(f"/evolution/decisions/{decision.pk}/reject/").status_code == 403
    assert (
        client.post(f"/evolution/policies/{policy.pk}/edit/", _form(policy, window_seconds=900)).status_code
        == 403
    )
    decision.refresh_from_db()
    policy.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED
    assert policy.window_seconds == 600


def test_annotator_cannot_open_evolution(member, world):
    policy, *_ = world
    client = _client(member(Role.ANNOTATOR))
    assert client.get("/evolution/").status_code == 403
    assert client.get(f"/evolution/policies/{policy.pk}/").status_code == 403
    assert ">Evolution</a>" not in client.get("/").content.decode()


def test_operator_approves_and_rejects_in_the_console(member, world):
    policy, decision, _, _ = world
    other = DecisionFactory(policy=policy)
    client = _client(member(Role.OPERATOR))
    response = client.post(f"/evolution/decisions/{decision.pk}/approve/", follow=True)
    assert "Approved." in response.content.decode()
    again = client.post(f"/evolution/decisions/{decision.pk}/approve/", follow=True)
    assert "not waiting for approval" in again.content.decode()  # the domain error as a message
    client.post(f"/evolution/decisions/{other.pk}/reject/", {"reason": "not during the sale"})
    decision.refresh_from_db()
    other.refresh_from_db()
    assert decision.status == DecisionStatus.APPROVED
    assert other.status == DecisionStatus.REJECTED
    assert other.outcome == "not during the sale"


def test_the_settings_form_shows_field_errors_and_changes_nothing(member, world):
    policy, *_ = world
    client = _client(member(Role.OPERATOR))
    response = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(
            policy,
            window_seconds=5,
            **{"signal-1-name": "happiness", "signal-1-threshold": 1},
            gate_source="environment",
            gate_cases="many",
        ),
    )
    assert response.status_code == 400
    page = response.content.decode()
    # not a number, not a known signal: the form's own errors, before the service is asked
    assert 'data-field="gate_cases"' in page
    assert 'data-field="signal-1-name"' in page
    response = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(
            policy,
            window_seconds=5,
            **{"signal-0-threshold": 1.5, "recipe_learning_rate": 2, "plan_stages": "50, 25"},
        ),
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert 'data-field="window_seconds"' in page
    # the service's errors on the fields they belong to: the signal's row, the recipe's and the plan's fields
    assert 'data-field="signal-0-threshold">threshold of a rate must be in [0, 1]' in page
    assert 'data-field="recipe_learning_rate">a number in (0, 1]' in page
    assert 'data-field="plan_stages">a rising list of percentages' in page
    # the input is kept as typed
    assert 'name="signal-0-threshold" value="1.5"' in page
    assert 'name="plan_stages" value="50, 25"' in page
    policy.refresh_from_db()
    assert policy.revision == 1
    assert policy.window_seconds == 600
    assert policy.signals == {"correction_rate": {"op": ">", "threshold": 0.2}}


def test_the_settings_form_saves_signals_recipe_and_release_plan_as_fields(member, world):
    policy, *_ = world
    policy.recipe = {"learning_rate": 1e-4, "schedule": "cosine", "total_steps": 40}
    policy.release_plan = {
        "stages": [10, 100],
        "guardrails": [{"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.05}],
    }
    policy.save()
    client = _client(member(Role.OPERATOR))
    page = client.get(f"/evolution/policies/{policy.pk}/").content.decode()
    assert 'name="plan_stages" value="10, 100"' in page
    assert 'name="recipe_learning_rate" value="0.0001"' in page
    assert '<option value="error_rate" selected>' in page  # the plan's guardrail, as a row
    assert "schedule = cosine" in page  # an engine setting no field covers, shown as kept
    saved = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(
            policy,
            **{
                "signal-0-name": "thumbs_down_rate",
                "signal-0-op": ">",
                "signal-0-threshold": 0.3,
                "signal-1-name": "reward_mean",
                "signal-1-op": "<",
                "signal-1-threshold": 0.5,
                "recipe_learning_rate": 0.001,
                "recipe_samples_per_step": 8,
                "recipe_max_steps": 20,
                "plan_stages": "5, 50, 100",
                "plan_stage_min_seconds": 60,
                "plan_inconclusive_limit": 2,
                "guardrail-0-metric": "",
                "guardrail-1-metric": "reward_mean",
                "guardrail-1-threshold": 0.1,
                "guardrail-1-min_samples": 20,
                "guardrail-1-judge": "interval",
            },
        ),
    )
    assert saved.status_code == 302
    policy.refresh_from_db()
    assert policy.signals == {
        "thumbs_down_rate": {"op": ">", "threshold": 0.3},
        "reward_mean": {"op": "<", "threshold": 0.5},
    }
    assert policy.recipe == {
        "learning_rate": 0.001,
        "samples_per_step": 8,
        "max_steps": 20,
        "schedule": "cosine",
        "total_steps": 40,
    }
    assert policy.release_plan == {
        "stages": [5, 50, 100],
        "stage_min_seconds": 60,
        "inconclusive_limit": 2,
        "guardrails": [
            {
                "metric": "reward_mean",
                "direction": "higher_is_better",
                "threshold": 0.1,
                "min_samples": 20,
                "judge": "interval",
            }
        ],
    }


def test_a_post_without_rows_keeps_the_lists_and_row_errors_land_on_their_row(member, world):
    from apps.core.errors import ValidationFailed
    from apps.evolution.forms import PolicyForm

    policy, *_ = world
    policy.release_plan = {
        "guardrails": [{"metric": "error_rate", "direction": "lower_is_better", "threshold": 0}]
    }
    policy.save()
    data = _form(policy)
    for key in ("signal-0-name", "signal-0-op", "signal-0-threshold", "signal-1-name", "guardrail-0-metric"):
        data.pop(key)
    form = PolicyForm(data, policy=policy)
    assert form.is_valid(), form.errors
    assert form.service_arguments()["signals"] == policy.signals
    assert form.service_arguments()["release_plan"] == policy.release_plan
    rows = PolicyForm(
        {**_form(policy), "guardrail-1-metric": "error_rate", "guardrail-1-threshold": 0.2}, policy=policy
    )
    assert rows.is_valid(), rows.errors
    # the plan's first guardrail is the second row (the first row is empty)
    rows.add_service_errors(
        ValidationFailed(
            "invalid",
            fields={
                "release_plan.guardrails[0]": ["threshold: must be ≥ 0"],
                "signals.correction_rate": ["op must be > or <"],
            },
        )
    )
    assert rows.errors["guardrail-1-threshold"] == ["must be ≥ 0"]
    assert rows.errors["signal-0-op"] == ["op must be > or <"]


def test_automatic_approval_without_guardrails_is_refused_on_the_guardrail_rows(member, world):
    policy, *_ = world
    client = _client(member(Role.OPERATOR))
    response = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(
            policy,
            mode="auto",
            approval_mode="automatic",
            update_kinds=["harness"],
            gate_source="environment",
            gate_environment="weather",
            gate_cases=2,
            **{"guardrail-0-threshold": 0.1},  # a deficit without its metric: the row's own error first
        ),
    )
    assert response.status_code == 400
    assert 'data-field="guardrail-0-metric">Choose the metric' in response.content.decode()
    response = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(
            policy,
            mode="auto",
            approval_mode="automatic",
            update_kinds=["harness"],
            gate_source="environment",
            gate_environment="weather",
            gate_cases=2,
        ),
    )
    assert response.status_code == 400
    assert 'data-field="guardrail-0-metric">automatic approval needs at least one guardrail' in (
        response.content.decode()
    )
    policy.refresh_from_db()
    assert policy.revision == 1


def test_the_settings_form_saves_and_refuses_a_stale_revision(member, world):
    policy, *_ = world
    client = _client(member(Role.OPERATOR))
    saved = client.post(f"/evolution/policies/{policy.pk}/edit/", _form(policy, window_seconds=900))
    assert saved.status_code == 302
    policy.refresh_from_db()
    assert policy.window_seconds == 900
    assert policy.revision == 2
    stale = client.post(
        f"/evolution/policies/{policy.pk}/edit/", _form(policy, revision=1, window_seconds=120)
    )
    assert stale.status_code == 409
    assert "changed since you read it" in stale.content.decode()
    policy.refresh_from_db()
    assert policy.window_seconds == 900
    assert AuditEvent.objects.filter(verb="evolution_policy.update").count() == 1


def test_new_policy_form(member, tenant):
    client = _client(member(Role.OPERATOR))
    assert client.get("/evolution/policies/new/").status_code == 200
    refused = client.post(
        "/evolution/policies/new/",
        {
            "model": "policy-small",
            "mode": "auto",
            "window_seconds": 600,
            "update_kinds": ["weights"],
            "gate_source": "environment",
            "gate_environment": "weather",
            "gate_cases": 5000,
            "approval_mode": "one_operator",
            "cooldown_seconds": 300,
            "compute_budget_seconds": 3600,
            "decision_ttl_seconds": 3600,
        },
    )
    assert refused.status_code == 400
    assert "cases: an integer from 1 to 1000" in refused.content.decode()
    assert not EvolutionPolicy.objects.exists()
    created = client.post(
        "/evolution/policies/new/",
        {
            "model": "policy-small",
            "mode": "observe",
            "enabled": "on",
            "window_seconds": 600,
            "signal-0-name": "reward_mean",
            "signal-0-op": "<",
            "signal-0-threshold": 0.5,
            "approval_mode": "one_operator",
            "cooldown_seconds": 300,
            "compute_budget_seconds": 3600,
            "decision_ttl_seconds": 3600,
        },
    )
    policy = EvolutionPolicy.objects.get()
    assert created.status_code == 302
    assert created["Location"] == f"/evolution/policies/{policy.pk}/"
    assert policy.signals == {"reward_mean": {"op": "<", "threshold": 0.5}}
    assert policy.recipe == {}
    assert policy.release_plan == {}


def test_another_tenants_policy_and_decisions_are_404(member, other_tenant, world):
    policy, decision, _, _ = world
    outsider = _client(member(Role.OPERATOR, of=other_tenant))
    assert outsider.get(f"/evolution/policies/{policy.pk}/").status_code == 404
    assert outsider.post(f"/evolution/decisions/{decision.pk}/approve/").status_code == 404
    assert outsider.post(f"/evolution/policies/{policy.pk}/edit/", _form(policy)).status_code == 404
    assert policy.model not in outsider.get("/evolution/").content.decode()
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED


def test_a_viewer_reads_the_settings_in_words_not_as_dicts(member, tenant):
    policy = EvolutionPolicyFactory(
        tenant=tenant,
        recipe={"learning_rate": 0.0001, "samples_per_step": 8},
        release_plan={
            "stages": [10, 100],
            "stage_min_seconds": 60,
            "guardrails": [
                {
                    "metric": "reward_mean",
                    "direction": "higher_is_better",
                    "threshold": 0.05,
                    "min_samples": 20,
                }
            ],
        },
    )
    page = _client(member(Role.VIEWER)).get(f"/evolution/policies/{policy.pk}/").content.decode()
    words = page.split('id="settings-words">')[1].split("</dl>")[0]
    assert "<code>correction_rate</code> above 0.2" in words
    assert "<code>learning_rate</code> 0.0001 · <code>samples_per_step</code> 8" in words
    assert "stages 10 → 100 % of new sessions, at least 60 s each" in words
    assert "reward_mean (higher is better, worse by at most 0.05 once each arm has 20 samples)" in words
    assert "{" not in words
