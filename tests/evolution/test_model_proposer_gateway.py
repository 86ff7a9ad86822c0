"""The model proposer's call (apps.loop.proposing.model_complete, the `complete` of ModelProposer) goes
through the real gateway as the tenant's own traffic, like the LLM judge's: budgeted, priced and recorded as
eval traffic under a session key of its own, and refused when the tenant's budget or policy says no, before any
backend is reached (issue 26, Low)."""

import pytest

from apps.core.errors import ValidationFailed
from apps.gateway.models import BudgetLedger
from apps.inference.models import BackendKind, BackendState
from apps.loop.proposing import PROPOSER_AGENT, model_complete
from apps.tenants.models import TenantPolicy
from apps.trajectories.models import Purpose, Step, Trajectory
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.rewards.judge_standin import judge_standin
from workers.evolution.harness import HarnessSpec
from workers.evolution.proposers import ModelProposer

pytestmark = pytest.mark.django_db(transaction=True)

CLUSTER = {"tool": "get_weather", "kind": "error", "count": 3}
REPLY = "<system_prompt>Call get_weather with a city name only.</system_prompt>"


def _teacher(tenant, url):
    return BackendFactory(
        tenant=tenant,
        name="teacher",
        base_url=url,
        kind=BackendKind.OPENAI_COMPATIBLE,
        served_model="teacher",
        model_version="1",
        state=BackendState.UP,
    )


def test_the_proposers_call_is_budgeted_priced_and_recorded_as_eval_traffic(gateway, tenant, settings):
    url, gw = gateway
    settings.AREAL_GATEWAY_URL = url
    TenantPolicy.objects.filter(tenant=tenant).update(
        price_table={"teacher": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0}}, monthly_budget_usd=100
    )
    with judge_standin("teacher", [REPLY]) as (teacher_url, standin):
        _teacher(tenant, teacher_url)
        proposal = ModelProposer(model_complete(tenant=tenant, model="teacher")).propose(
            CLUSTER, HarnessSpec("h1", "Be brief."), []
        )
    assert proposal is not None
    assert proposal.system_prompt == "Call get_weather with a city name only."
    assert len(standin.requests) == 1
    assert standin.requests[0]["model"] == "teacher"

    drain(gw)
    session = Trajectory.objects.get(tenant=tenant)
    assert (session.purpose, session.api_key_prefix, session.agent_name) == (
        Purpose.EVAL,  # recorded, never trained on, and not production traffic the control plane reads
        "harness",
        PROPOSER_AGENT,
    )
    step = Step.objects.get(trajectory=session)
    assert float(step.cost_usd) == pytest.approx((40 * 1.0 + 12 * 2.0) / 1000)  # the stand-in's usage, priced
    assert float(BudgetLedger.objects.get(tenant=tenant).spent_usd) == pytest.approx(float(step.cost_usd))


def test_a_spent_budget_refuses_the_proposer_before_any_backend_is_reached(gateway, tenant, settings):
    url, _ = gateway
    settings.AREAL_GATEWAY_URL = url
    TenantPolicy.objects.filter(tenant=tenant).update(
        price_table={"teacher": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0}}, monthly_budget_usd=0
    )
    with judge_standin("teacher", [REPLY]) as (teacher_url, standin):
        _teacher(tenant, teacher_url)
        with pytest.raises(ValidationFailed) as refused:
            model_complete(tenant=tenant, model="teacher")([{"role": "user", "content": "Propose"}])
    assert refused.value.code == "proposer_call_failed"
    assert "429 budget_exceeded" in refused.value.message
    assert standin.requests == []


def test_a_model_the_tenant_does_not_allow_is_refused(gateway, tenant, settings):
    url, _ = gateway
    settings.AREAL_GATEWAY_URL = url
    TenantPolicy.objects.filter(tenant=tenant).update(allowed_models=["policy-small"])
    with judge_standin("teacher", [REPLY]) as (teacher_url, standin):
        _teacher(tenant, teacher_url)
        with pytest.raises(ValidationFailed) as refused:
            model_complete(tenant=tenant, model="teacher")([{"role": "user", "content": "Propose"}])
    assert refused.value.code == "proposer_call_failed"
    assert standin.requests == []
