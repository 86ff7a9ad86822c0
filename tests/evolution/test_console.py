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
        "signals": '{"correction_rate": {"op": ">", "threshold": 0.2}}',
        "update_kinds": [],
        "recipe": "{}",
        "release_plan": "{}",
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
            signals='{"happiness": {"op": ">", "threshold": 1}}',
            gate_source="environment",
            gate_cases="many",
        ),
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert (
        'data-field="gate_cases"' in page
    )  # not a number: the form's own error, before the service is asked
    response = client.post(
        f"/evolution/policies/{policy.pk}/edit/",
        _form(policy, window_seconds=5, signals='{"happiness": {"op": ">", "threshold": 1}}'),
    )
    page = response.content.decode()
    assert response.status_code == 400
    assert 'data-field="window_seconds"' in page
    assert 'data-field="signals"' in page
    assert "happiness: unknown signal" in page
    policy.refresh_from_db()
    assert policy.revision == 1
    assert policy.window_seconds == 600


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
            "signals": '{"reward_mean": {"op": "<", "threshold": 0.5}}',
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


def test_another_tenants_policy_and_decisions_are_404(member, other_tenant, world):
    policy, decision, _, _ = world
    outsider = _client(member(Role.OPERATOR, of=other_tenant))
    assert outsider.get(f"/evolution/policies/{policy.pk}/").status_code == 404
    assert outsider.post(f"/evolution/decisions/{decision.pk}/approve/").status_code == 404
    assert outsider.post(f"/evolution/policies/{policy.pk}/edit/", _form(policy)).status_code == 404
    assert policy.model not in outsider.get("/evolution/").content.decode()
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.PROPOSED
