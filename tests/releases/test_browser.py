"""In a real headless Chromium: an operator watches a release's analysis arrive live over the WebSocket (chart
and verdict), then approves the promotion with a confirmation; an annotator sees the release but no button."""

import asyncio
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.releases.analysis import release_analyze
from apps.releases.models import Release, ReleaseStatus
from apps.training.selectors import alias_resolve
from apps.trajectories.services import steps_ingest
from tests.browser_support import browser, login, page  # noqa: F401  (fixtures)
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)
from tests.releases.helpers import release_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _traffic(tenant, release):
    """Two production calls per arm since the canary began, as the gateway would have recorded them."""
    records = [
        {
            "step_id": str(uuid.uuid4()),
            "tenant_id": tenant.pk,
            "session_id": f"s-{arm}-{index}",
            "endpoint": "chat",
            "served_model": release.model,
            "model_version": str(version.number),
            "latency_ms": 40 + index,
            "observation": {"messages": [{"role": "user", "content": "hi"}]},
        }
        for arm, version in (("c", release.candidate), ("b", release.baseline))
        for index in range(2)
    ]
    steps_ingest(records=records)


def test_operator_approves_a_promotion_and_an_annotator_sees_no_button(
    gateway,
    page,
    browser,
    member,  # noqa: F811
    tenant,
):
    url, gw = gateway
    release = release_at(
        tenant,
        ReleaseStatus.CANARY,
        stage_index=0,
        stages=[100],
        guardrails=[
            {"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.5, "min_samples": 2}
        ],
    )
    Release.objects.filter(pk=release.pk).update(
        canary_started_at=timezone.now() - timedelta(minutes=1),
        stage_started_at=timezone.now() - timedelta(minutes=1),
    )
    _traffic(tenant, release)
    operator, annotator = member("operator"), member("annotator")

    login(page, url, operator)
    page.click("nav.mainnav >> text=Releases")
    page.click(f"tr[data-release='{release.pk}'] a")
    page.wait_for_selector("#release-status")
    assert page.locator("#approve").count() == 0  # not awaiting approval yet
    page.wait_for_function("document.body.dataset.live === 'subscribed'")

    # The beat tick, run in the server's event loop as a worker's would publish: the page updates live.
    loop = gw._flusher.get_loop()
    asyncio.run_coroutine_threadsafe(
        sync_to_async(release_analyze)(tenant=tenant, release_id=release.pk), loop
    ).result(timeout=30)
    page.wait_for_function("document.getElementById('last-verdict').textContent === 'successful'")
    page.wait_for_function("document.getElementById('release-status').textContent === 'awaiting_approval'")
    assert (
        page.locator("#chart-error_rate .main-svg").count() > 0
    )  # the Plotly chart drawn from the WebSocket
    page.shoot("live-analysis")

    page.reload()
    assert "Awaiting approval" in page.locator("#release-status").inner_text()
    assert page.locator("#chart-error_rate .main-svg").count() > 0  # server-side figure this time
    assert page.locator("#guardrails tr[data-metric='error_rate'] .verdict").inner_text() == "successful"
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#approve")
    page.wait_for_selector("text=Promoted.")
    assert "Promoted" in page.locator("#release-status").inner_text()
    assert page.locator("#approve").count() == 0
    assert page.locator("#rollback").count() == 0
    page.shoot("promoted")
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED
    assert release.approved_by == operator.username
    assert alias_resolve(tenant=tenant, name=release.model, alias="production").pk == release.candidate_id
    assert page.javascript_errors == []

    other = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    context = browser.new_context()
    annotator_page = context.new_page()
    login(annotator_page, url, annotator)
    annotator_page.goto(f"{url}/releases/")  # not in an annotator's navigation, which holds only their queues
    annotator_page.click(f"tr[data-release='{other.pk}'] a")
    annotator_page.wait_for_selector("#release-status")
    assert "Awaiting approval" in annotator_page.locator("#release-status").inner_text()
    assert annotator_page.locator("#approve").count() == 0
    assert annotator_page.locator("#rollback").count() == 0
    assert annotator_page.locator("#release-actions").count() == 0
    context.close()
