"""An evolution policy's gate as fields, not a JSON textarea (issue 29): an environment's held-out cases or an
evaluation suite, the minimum gain and a safety suite; the service's `gate.*` problems on their own field; the
policy page says the gate in a sentence."""

import pytest
from django.test import Client

from apps.evolution.forms import PolicyForm
from apps.evolution.models import EvolutionPolicy
from apps.tenants.permissions import Role
from tests.evaluation.factories import EvalSuiteFactory
from tests.evolution.factories import EvolutionPolicyFactory

pytestmark = pytest.mark.django_db
NEW = {
    "model": "policy-small",
    "mode": "observe",
    "enabled": "on",
    "window_seconds": 600,
    "approval_mode": "one_operator",
    "cooldown_seconds": 300,
    "compute_budget_seconds": 3600,
    "decision_ttl_seconds": 3600,
}


@pytest.fixture
def operator(member):
    client = Client()
    client.force_login(member(Role.OPERATOR))
    return client


def test_an_environment_gate_from_its_fields(operator, tenant):
    page = operator.get("/evolution/policies/new/").content.decode()
    assert 'name="gate_source"' in page
    assert 'name="gate"' not in page
    response = operator.post(
        "/evolution/policies/new/",
        {
            **NEW,
            "gate_source": "environment",
            "gate_environment": "weather",
            "gate_cases": 20,
            "gate_seed": 7,
            "gate_min_gain": "0.05",
        },
    )
    assert response.status_code == 302
    policy = EvolutionPolicy.objects.get(tenant=tenant)
    assert policy.gate == {"environment": "weather", "cases": 20, "seed": 7, "min_gain": 0.05}
    page = operator.get(f"/evolution/policies/{policy.pk}/").content.decode()
    words = page.split('id="gate-words">')[1].split("</dd>")[0]
    assert (
        words
        == "20 held-out cases of weather (seed 7); the candidate must beat the best production version by at least 0.05."
    )
    assert 'name="gate_cases" value="20"' in page  # the edit form starts from the gate


def test_a_suite_gate_with_a_safety_suite(operator, tenant, other_tenant):
    suite, safety = (
        EvalSuiteFactory(tenant=tenant, name="held-out"),
        EvalSuiteFactory(tenant=tenant, name="safety"),
    )
    theirs = EvalSuiteFactory(tenant=other_tenant, name="their-suite")
    page = operator.get("/evolution/policies/new/").content.decode()
    assert "their-suite" not in page
    response = operator.post(
        "/evolution/policies/new/",
        {**NEW, "gate_source": "suite", "gate_suite": suite.pk, "gate_safety_suite": safety.pk},
    )
    assert response.status_code == 302
    policy = EvolutionPolicy.objects.get(tenant=tenant)
    assert policy.gate == {"suite_id": suite.pk, "safety_suite_id": safety.pk}
    words = operator.get(f"/evolution/policies/{policy.pk}/").content.decode().split('id="gate-words">')[1]
    assert words.startswith("The evaluation suite held-out; the candidate must do at least as well")
    assert "no worse on the safety suite safety" in words.split("</dd>")[0]
    refused = operator.post(
        "/evolution/policies/new/", {**NEW, "model": "other", "gate_source": "suite", "gate_suite": theirs.pk}
    )
    assert refused.status_code == 400  # another tenant's suite is no choice here
    assert 'data-field="gate_suite"' in refused.content.decode()


def test_the_services_gate_problems_land_on_their_fields(operator, tenant):
    policy = EvolutionPolicyFactory(tenant=tenant, model="policy-small")
    response = operator.post(
        "/evolution/policies/new/",
        {
            **NEW,
            "mode": "auto",
            "update_kinds": ["weights"],
            "gate_source": "environment",
            "gate_environment": "weather",
            "gate_cases": 0,
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-field="gate_cases"' in page
    gateless = operator.post(
        "/evolution/policies/new/", {**NEW, "model": "gateless", "mode": "auto", "update_kinds": ["weights"]}
    )
    assert gateless.status_code == 400
    assert 'data-field="gate_source"' in gateless.content.decode()  # auto mode needs a gate
    assert list(EvolutionPolicy.objects.filter(tenant=tenant)) == [policy]


def test_gate_settings_the_fields_do_not_cover_are_kept(operator, tenant):
    policy = EvolutionPolicyFactory(
        tenant=tenant, model="policy-small", gate={"environment": "weather", "cases": 5}
    )
    EvolutionPolicy.objects.filter(pk=policy.pk).update(
        gate={"environment": "weather", "cases": 5, "hidden": 1}
    )
    policy.refresh_from_db()
    form = PolicyForm(
        {**NEW, "gate_source": "environment", "gate_environment": "weather", "gate_cases": 9},
        policy=policy,
    )
    assert form.is_valid(), form.errors
    assert form.gate_dict() == {"environment": "weather", "cases": 9, "hidden": 1}
