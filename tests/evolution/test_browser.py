"""In a real headless Chromium: an operator opens a policy's page; a signal point and a decision recorded
meanwhile appear live over the WebSocket (chart extended, decision in the timeline with its evidence), and
the operator approves the decision from the timeline."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.audit.services import Actor
from apps.evolution.decisions import STREAM, decision_record
from apps.evolution.models import DecisionStatus
from apps.metrics.publish import metrics_publish
from tests.browser_support import browser, login, page  # noqa: F401  (fixtures)
from tests.evolution.factories import EvolutionPolicyFactory, SignalPointFactory
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TRAJECTORY = "6f1b3c2a-0000-4000-8000-000000000002"


def _in_server(gw, call, **kwargs):
    """Runs `call` in the server's event loop, as a worker's publication reaches the page."""
    loop = gw._flusher.get_loop()
    return asyncio.run_coroutine_threadsafe(sync_to_async(call)(**kwargs), loop).result(timeout=30)


def test_a_decision_appears_live_and_the_operator_approves_it(gateway, page, member, tenant):  # noqa: F811
    url, gw = gateway
    policy = EvolutionPolicyFactory(tenant=tenant, model="policy-small", mode="propose")
    SignalPointFactory(policy=policy, name="correction_rate", value=0.12)
    operator = member("operator")

    login(page, url, operator)
    page.click("nav.mainnav >> text=Evolution")
    page.click(f"tr[data-policy='{policy.pk}'] a")
    page.wait_for_selector("#chart-correction_rate .main-svg")
    page.wait_for_function("document.body.dataset.live === 'subscribed'")
    assert page.locator("#no-decisions").count() == 1

    _in_server(
        gw,
        metrics_publish,
        tenant_id=tenant.pk,
        stream=STREAM,
        payload={
            "type": "signals",
            "policy": policy.pk,
            "at": timezone.now().isoformat(),
            "values": {"correction_rate": 0.31, "tool_failure_rate": 0.05},
        },
    )
    page.wait_for_function("document.getElementById('chart-correction_rate').data[0].y.length === 2")
    page.wait_for_selector("#chart-tool_failure_rate .main-svg")  # a signal with no chart yet gets one

    decision = _in_server(
        gw,
        decision_record,
        tenant=tenant,
        policy=policy,
        kind="train",
        reason="correction_rate 0.31 > 0.2",
        evidence={
            "signals": [{"name": "correction_rate", "value": 0.31, "op": ">", "threshold": 0.2}],
            "trajectories": [TRAJECTORY],
        },
        actor=Actor.system(f"evolution policy {policy.pk}"),
    )
    item = page.locator(f"li[data-decision='{decision.pk}']")
    item.wait_for()
    assert "Waiting for approval" in item.inner_text()
    assert "correction_rate 0.31 > 0.2" in item.locator(".evidence-signals").inner_text()
    assert item.locator(f"a[href='/trajectories/{TRAJECTORY}/']").count() == 1
    assert page.locator("#no-decisions").count() == 0
    page.shoot("decision-live")

    questions = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    item.locator("button.approve").click()
    page.wait_for_selector("text=Approved.")
    assert questions == [f"Approve this train decision for {policy.model}?"]  # asked before it was sent
    approved = page.locator(f"li[data-decision='{decision.pk}']")
    assert "approved" in approved.inner_text().lower()
    assert approved.locator("button.approve").count() == 0
    page.shoot("approved")
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.APPROVED
    assert [row["actor"] for row in decision.approvals] == [operator.username]
    assert page.javascript_errors == []
