"""The console's three roles in a real headless Chromium (issue 29), each through its flows, every page they
visit checked with axe-core (zero serious or critical violations) and free of JavaScript errors, then a
phone-sized pass (390x844: the navigation folds behind Menu, pages fit the screen) and the dark scheme.

- admin: the empty overview says what to do; invites a person by email as annotator (the role select starts on
  a prompt), who sets a password through the link and is signed in; creates a key and reads the two lines each
  client needs; filters the audit log by a verb it offers; as staff, creates a tenant.
- operator: a release awaiting approval in words and on its charts; a second release refused by the service, the
  reason at the top of the form and what was typed kept; Approve asks, naming the version and its share; a
  control-plane decision the same; searches trajectories and opens one; pages the models list.
- annotator: sees only their queues; labels with the keyboard beside the item, goes back to change the label,
  skips, and reads the queue's items.
"""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.annotation.models import AnnotationLabel
from apps.annotation.services import annotation_queue_create
from apps.evolution.models import DecisionStatus
from apps.releases.analysis import release_analyze
from apps.releases.models import Release, ReleaseStatus
from apps.tenants.models import Membership, Tenant
from apps.tenants.permissions import Role
from apps.trajectories.models import Trajectory
from tests.browser_support import browser, login, page  # noqa: F401  (fixtures)
from tests.console.journey_support import DESKTOP, PHONE, checked, fits_the_screen, paths, screenshot, visit
from tests.evolution.factories import DecisionFactory, EvolutionPolicyFactory
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)
from tests.releases.helpers import release_at, version_over
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.builders import gateway_step, ingested
from tests.trajectories.factories import TrajectoryFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
GUARDRAILS = [
    {"metric": "reward_mean", "direction": "higher_is_better", "threshold": 0.25, "min_samples": 10},
    {
        "metric": "reward_mean",
        "direction": "higher_is_better",
        "threshold": 0.0,
        "min_samples": 10,
        "judge": "interval",
    },
]


def _accepting(page, answers: list, *, accept: bool = True):
    """The next confirmation is recorded in `answers` and accepted (or dismissed)."""
    page.once(
        "dialog",
        lambda dialog: (answers.append(dialog.message), dialog.accept() if accept else dialog.dismiss()),
    )


def test_an_admin_onboards_a_person_issues_a_key_and_creates_a_tenant(
    gateway, page, browser, admin_user, tenant
):  # noqa: F811
    url, _ = gateway
    visited: list = []
    login(page, url, admin_user)
    checked(page, visited)
    assert "No traffic yet" in page.locator("#no-traffic").inner_text()
    assert f"{url}/v1" in page.locator("#no-traffic").inner_text()
    screenshot(page, "overview")

    # Invite a person by email: the role select starts on a prompt, never on Admin.
    page.click("nav.mainnav >> text=Members")
    checked(page, visited)
    assert page.locator("#invite select[name=role]").input_value() == ""
    page.fill("#invite input[name=user]", "newcomer@example.test")
    page.click("#invite button[type=submit]")
    assert "errorlist" in page.content()  # no role chosen: a field error, nothing created
    assert not get_user_model().objects.filter(email="newcomer@example.test").exists()
    page.select_option("#invite select[name=role]", "annotator")
    page.click("#invite button[type=submit]")
    checked(page, visited)
    link = page.locator("#invite-link").inner_text().strip()
    assert "/invitation/" in link
    screenshot(page, "member-invited")

    # The invited person sets a password and is signed in.
    context = browser.new_context(viewport=DESKTOP)
    newcomer = context.new_page()
    newcomer.javascript_errors = []
    newcomer.on("pageerror", lambda error: newcomer.javascript_errors.append(str(error)))
    visit(newcomer, link, visited)
    newcomer.fill("#id_password", "correct horse battery staple")
    newcomer.fill("#id_repeated", "correct horse battery staple")
    newcomer.click("button[type=submit]")
    newcomer.wait_for_url(f"{url}/")
    assert "Your password is set" in newcomer.content()
    assert newcomer.locator("nav.mainnav a").all_inner_texts() == ["Annotation"]
    context.close()
    assert Membership.objects.get(tenant=tenant, user__email="newcomer@example.test").role == Role.ANNOTATOR

    # A key, and the lines an agent needs.
    page.click("nav.mainnav >> text=API keys")
    checked(page, visited)
    page.fill("#create-key input[name=name]", "support-agent")
    page.check("#create-key input[value=inference]")
    page.click("#create-key button[type=submit]")
    checked(page, visited)
    raw = page.locator("#new-key").inner_text().strip()
    assert f'OpenAI(base_url="{url}/v1", api_key="{raw}")' in page.locator("#snippet-openai").inner_text()
    assert f'Anthropic(base_url="{url}", api_key="{raw}")' in page.locator("#snippet-anthropic").inner_text()
    assert f"OPENAI_API_KEY={raw}" in page.locator("#snippet-areal").inner_text()
    screenshot(page, "key-created")

    # The audit log's verb filter offers what exists.
    page.click("nav.mainnav >> text=Audit log")
    checked(page, visited)
    verbs = page.locator("#id_verb option").evaluate_all("options => options.map(o => o.value)")
    assert "member.invite" in verbs
    assert "api_key.create" in verbs
    page.select_option("#id_verb", "member.")
    page.click("form.filters button[type=submit]")
    checked(page, visited)
    assert set(page.locator("table td:nth-child(4)").all_inner_texts()) <= {
        "member.invite",
        "member.password_set",
    }
    page.click("nav.mainnav >> text=Policy")
    checked(page, visited)

    # As staff, a new tenant from the console.
    get_user_model().objects.filter(pk=admin_user.pk).update(is_staff=True)
    page.goto(f"{url}/")
    page.click("text=New tenant")
    checked(page, visited)
    page.fill("#id_slug", "initech")
    page.fill("#id_name", "Initech")
    page.click("#tenant-new button[type=submit]")
    checked(page, visited)
    assert "Created Initech; you are its admin." in page.content()
    assert Tenant.objects.filter(slug="initech").exists()
    assert len(visited) == 11  # pages checked with axe-core, a POST's answer included
    assert {"/", "/settings/members/", "/settings/keys/", "/audit/", "/settings/policy/"} <= paths(visited)


def _analysed_awaiting(tenant, monkeypatch):
    candidate_values, baseline_values = [1.0] * 18 + [0.0] * 22, [1.0] * 20 + [0.0] * 20
    release = release_at(tenant, ReleaseStatus.CANARY, stage_index=0, stages=[25], guardrails=GUARDRAILS)
    candidate = str(release.candidate.number)

    def samples(*, tenant, model, version, since):
        rewards = candidate_values if version == candidate else baseline_values
        return {"reward_mean": rewards, "error_rate": [], "latency_p95": [], "cost_per_task": []}

    monkeypatch.setattr("apps.releases.measure.arm_samples", samples)
    Release.objects.filter(pk=release.pk).update(
        canary_started_at=timezone.now() - timedelta(minutes=5),
        stage_started_at=timezone.now() - timedelta(minutes=5),
    )
    release_analyze(tenant=tenant, release_id=release.pk)
    release.refresh_from_db()
    if release.status != ReleaseStatus.AWAITING_APPROVAL:
        Release.objects.filter(pk=release.pk).update(status=ReleaseStatus.AWAITING_APPROVAL)
    return release


def test_an_operator_decides_with_the_evidence_in_front_of_them(gateway, page, member, tenant, monkeypatch):  # noqa: F811
    url, _ = gateway
    release = _analysed_awaiting(tenant, monkeypatch)
    candidate = f"v{release.candidate.number}"
    policy = EvolutionPolicyFactory(tenant=tenant, model=release.model, mode="propose")
    decision = DecisionFactory(tenant=tenant, policy=policy, kind="promote", version=release.candidate)
    ingested(
        tenant,
        "s-oslo",
        [
            gateway_step(
                tenant,
                "s-oslo",
                action={
                    "text": "Snow in Tromsoe",
                    "tool_calls": [],
                    "message": {"role": "assistant", "content": "Snow in Tromsoe"},
                },
            )
        ],
    )
    ingested(tenant, "s-rome", [gateway_step(tenant, "s-rome")])
    operator = member(Role.OPERATOR)
    visited: list = []

    login(page, url, operator)
    checked(page, visited)
    page.click("nav.mainnav >> text=Releases")
    checked(page, visited)
    row = page.locator(f"tr[data-release='{release.pk}']")
    assert row.locator("a").inner_text() == f"{candidate} over v{release.baseline.number}"
    assert f"{candidate} passed every stage up to 25 % of new sessions" in row.inner_text()
    page.click(f"tr[data-release='{release.pk}'] a")
    page.wait_for_selector("#guardrail-chart-0 .main-svg")
    checked(page, visited)
    effect = page.locator("#approval-effect").inner_text()
    assert f"promotes {candidate} of {release.model} to production" in effect
    assert "it takes 25 % of them now" in effect
    point = page.locator("#guardrails tr[data-guardrail='0']")
    assert "40 candidate and 40 baseline samples of the 10 needed per arm" in point.inner_text()
    assert re.search(r"worse by [+-][\d.]+ to [+-][\d.]+ \(95 % interval\)", point.inner_text())
    assert page.locator("#guardrail-chart-1 .main-svg").count() > 0  # Plotly drew it
    screenshot(page, "release-awaiting-approval")

    # A second release of the model while this one awaits approval: the service refuses it; the form says
    # why at its top and keeps what was typed.
    second = version_over(tenant, "/models/second", parent=release.candidate)
    page.click("nav.mainnav >> text=Releases")
    page.click("#new-release")
    checked(page, visited)
    page.select_option("#id_candidate", str(second.pk))
    page.fill("#id_stages", "10, 50, 100")
    page.click("#create-release")
    page.wait_for_selector("#form-errors")
    checked(page, visited)
    refusal = page.locator("#form-errors").inner_text()
    assert f"The release was not created: another release of {release.model} is active" in refusal
    assert page.locator("#id_stages").input_value() == "10, 50, 100"
    assert page.locator("#id_candidate").input_value() == str(second.pk)
    assert Release.objects.filter(tenant=tenant).count() == 1
    screenshot(page, "release-form-refused")
    page.goto(f"{url}/releases/{release.pk}/")
    page.wait_for_selector("#guardrail-chart-0 .main-svg")

    questions: list = []
    _accepting(page, questions, accept=False)
    page.click("#approve")
    assert questions == [
        f"Promote {candidate} of {release.model} to production? It takes 100 % of new sessions and v{release.baseline.number} is retired."
    ]
    release.refresh_from_db()
    assert release.status == ReleaseStatus.AWAITING_APPROVAL  # dismissed: nothing sent
    _accepting(page, questions)
    page.click("#approve")
    page.wait_for_selector("text=Promoted.")
    checked(page, visited)
    release.refresh_from_db()
    assert release.status == ReleaseStatus.PROMOTED

    # The control plane's decision card asks the same way.
    page.click("nav.mainnav >> text=Evolution")
    checked(page, visited)
    page.click(f"tr[data-policy='{policy.pk}'] a")
    page.wait_for_selector(f"li[data-decision='{decision.pk}']")
    checked(page, visited)
    _accepting(page, questions)
    page.locator(f"li[data-decision='{decision.pk}'] button.approve").click()
    page.wait_for_selector("text=Approved.")
    assert f"promoting {candidate} of {release.model}" in questions[-1]
    assert "100%" in questions[-1]
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.APPROVED

    # Trajectories by content; the models list.
    page.click("nav.mainnav >> text=Trajectories")
    checked(page, visited)
    page.fill("#id_text", "tromsoe")
    page.click("form.filters button[type=submit]")
    checked(page, visited)
    assert page.locator("#trajectories tbody tr[data-trajectory]").count() == 1
    assert "bookmark or share it" in page.locator("#filter-link").inner_text()
    screenshot(page, "trajectories-search")
    page.click("#trajectories tbody tr[data-trajectory] a")
    page.wait_for_selector("h1 >> text=Trajectory")
    checked(page, visited)
    assert "s-oslo" in page.locator("h1").inner_text()
    page.click("nav.mainnav >> text=Models")
    checked(page, visited)
    assert page.locator("#versions .aliases").first.inner_text().strip() != ""
    screenshot(page, "models")
    page.click("nav.mainnav >> text=Training queue")
    checked(page, visited)
    assert len(visited) >= 13  # pages checked with axe-core
    trajectory = Trajectory.objects.get(tenant=tenant, session_id="s-oslo")
    assert {
        "/",
        "/releases/",
        f"/releases/{release.pk}/",
        "/releases/new/",
        "/evolution/",
        f"/evolution/policies/{policy.pk}/",
        "/trajectories/",
        f"/trajectories/{trajectory.pk}/",
        "/models/",
        "/training-queue/",
    } <= paths(visited)


def test_an_annotator_labels_beside_the_item_goes_back_and_skips(live_server, page, member, tenant):  # noqa: F811
    spec = make_spec(tenant, name="helpful", kind="boolean", description="The answer solves the user's task.")
    for number in range(3):
        TrajectoryFactory(tenant=tenant, task_id="support", text=f"reply {number}", steps=2)
    annotator = member(Role.ANNOTATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="support",
        spec_id=spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[annotator.pk],
        sample_size=3,
    )
    visited: list = []
    page.goto(f"{live_server.url}/login/")
    checked(page, visited)
    login(page, live_server.url, annotator)
    assert page.locator("nav.mainnav a").all_inner_texts() == ["Annotation"]
    page.click("nav.mainnav >> text=Annotation")
    checked(page, visited)
    page.click(f"tr[data-queue='{queue.pk}'] >> text=Start labelling")
    page.wait_for_selector("#label-form")
    checked(page, visited)
    assert page.locator("#answer-to-judge").is_visible()
    assert page.locator(".workspace-rating").is_visible()  # the rating beside the item
    assert "it meets the spec" in page.locator(".workspace-rating").inner_text()
    assert "previous item" in page.locator("#shortcuts").inner_text()
    screenshot(page, "annotation-workspace")

    page.keyboard.press("1")  # yes
    page.keyboard.press("s")
    page.wait_for_selector("text=Label saved.")
    page.wait_for_load_state("load")
    page.keyboard.press("p")  # back to it: change the label
    page.wait_for_selector("#revise-form")
    checked(page, visited)
    page.check("#revise-form input[name=option][value='2']")
    page.click("#revise-form button[type=submit]")
    page.wait_for_selector("text=Label changed.")
    assert AnnotationLabel.objects.get(annotator=annotator).value == 0.0

    page.wait_for_load_state("load")
    page.keyboard.press("x")  # skip the second, then take it back
    page.wait_for_selector("text=Skipped.")
    page.click("#previous-link")
    page.wait_for_selector("#unskip-form")
    checked(page, visited)
    page.click("#unskip-form button[type=submit]")
    page.wait_for_selector("text=Skip taken back")
    checked(page, visited)

    page.goto(f"{live_server.url}/annotation/{queue.pk}/")
    checked(page, visited)
    assert page.locator("#items tr[data-item]").count() == 3
    assert "needs exactly two annotators" in page.locator("#kappa").inner_text()
    screenshot(page, "annotation-queue")
    assert len(visited) >= 7  # pages checked with axe-core
    assert {"/login/", "/annotation/", f"/annotation/{queue.pk}/work/", f"/annotation/{queue.pk}/"} <= paths(
        visited
    )


def test_a_phone_sized_pass_and_the_dark_scheme(gateway, browser, member, tenant, monkeypatch):  # noqa: F811
    url, _ = gateway
    release = _analysed_awaiting(tenant, monkeypatch)
    spec = make_spec(tenant, name="helpful", kind="boolean")
    TrajectoryFactory(tenant=tenant, task_id="support", text="a long answer " * 20, steps=2)
    operator = member(Role.OPERATOR)
    queue = annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="phone",
        spec_id=spec.pk,
        filters={"task_id": "support"},
        annotators_per_item=1,
        assignee_ids=[operator.pk],  # an operator may label too
    )
    visited: list = []
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport=PHONE, color_scheme=scheme, is_mobile=True, has_touch=True)
        phone = context.new_page()
        phone.javascript_errors = []
        phone.on("pageerror", lambda error, phone=phone: phone.javascript_errors.append(str(error)))
        phone.shoot = lambda name, phone=phone: None
        login(phone, url, operator)
        assert not phone.locator("nav.mainnav").is_visible()  # folded behind Menu
        phone.click(".menu-toggle")
        assert phone.locator("nav.mainnav").is_visible()
        assert phone.locator(".menu-toggle").get_attribute("aria-expanded") == "true"
        for path in (
            "/",
            "/trajectories/",
            f"/releases/{release.pk}/",
            "/models/",
            f"/annotation/{queue.pk}/work/",
            "/settings/members/",
        ):
            visit(phone, url + path, visited)
            fits_the_screen(phone)
        if scheme == "dark":
            background = phone.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == "rgb(16, 20, 29)"  # the dark scheme follows the browser's preference
        else:
            phone.goto(url + f"/releases/{release.pk}/")
            screenshot(phone, "phone-release")
        context.close()
