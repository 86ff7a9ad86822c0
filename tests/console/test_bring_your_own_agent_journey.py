"""Bring your own agent, the whole loop, in a real headless Chromium: from an empty tenant, its admin and an
operator use only the console, the tenant's agent is an unmodified openai-SDK client that makes no session
call, and the stack is the one an installation runs (the web app, two embedded inference servers, Celery
workers on the real queues, and beat sending the periodic tasks). No `python -m demo`, no Django shell, no
service called by the test: the database is only read, to wait and to assert.

The journey: the admin creates an API key, registers the model the tenant dropped into its inbox, registers the
two servers as backends, makes the model's first version production, sets a short session idle timeout and
defines the training reward (a reward spec) and a rule evaluator that gives it. The agent plays episodes; beat closes its sessions as idle, the
evaluator rewards them and they qualify (Trajectories, Training queue). The operator starts an online run,
which learns from the next episodes and registers v1; evaluates v1 with a suite (the eval worker loads it on
the free serving slot); creates a release of v1 with a 50 % canary and starts it; the agent's sessions split
between the versions, beat's analysis passes the guardrail, and the operator approves the promotion.

On CI the same test runs on PostgreSQL and Redis (the workers and beat share the session's broker prefix)."""

import shutil
import time
from pathlib import Path

import openai
import pytest

from apps.evaluation.models import EvalRun
from apps.inference.models import InferenceBackend as Backend
from apps.releases.models import Release, ReleaseStatus
from apps.tenants.models import ApiKey
from apps.tenants.permissions import Role
from apps.training.models import ModelVersion
from apps.training.selectors import alias_resolve
from apps.trajectories.models import Step, Trajectory
from tests.browser_support import ARTIFACTS, browser, login, page  # noqa: F401  (fixtures)
from tests.gateway.conftest import gateway  # noqa: F401  (fixture)
from tests.gateway.helpers import drain
from tests.servers import inference_server
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from tests.workers_support import celery_stack
from workers.envs import weather
from workers.envs.agent import run_episode

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

MODEL = "my-agent"
# Beat's periods for this stack: idle sessions checked every second (closed after IDLE_SECONDS), releases analysed every 2 s.
STACK_ENV = {
    "AREAL_SESSION_IDLE_CHECK_SECONDS": "1",
    "AREAL_RELEASE_ANALYSIS_SECONDS": "2",
    "AREAL_EVOLUTION_TICK_SECONDS": "0",
}
IDLE_SECONDS = 5  # the tenant's session idle timeout (step 5)
GUARDRAILS = [{"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.5, "min_samples": 2}]


def _tenant_state() -> str:
    """The journey's trajectories (status, end reason, steps, continuation, verdict and its reasons), one line each."""
    rows = Trajectory.objects.order_by("started_at").values_list(
        "session_id",
        "status",
        "end_reason",
        "step_count",
        "continues_id",
        "qualification__status",
        "qualification__reasons",
    )
    return "\n".join(" ".join(str(value) for value in row) for row in rows)


def _wait(predicate, *, what: str, logs: Path, timeout: float = 240.0):
    """Polls `predicate` until it is true; a timeout fails with the trajectories and the logs' tails, as plain
    lines (CI's report folds long ones)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    tails = "\n".join(f"--- {path.name}\n{path.read_text()[-2500:]}" for path in sorted(logs.glob("*.log")))
    raise AssertionError(f"timed out waiting for {what}\n--- trajectories\n{_tenant_state()}\n{tails}")


def _reload_until(page, address: str, selector: str, expected: str, *, logs: Path, timeout: float = 240.0):  # noqa: F811
    """Server-rendered pages: reloads `address` until `selector`'s text contains `expected`."""

    seen = {"text": ""}

    def shown():
        response = page.goto(address)
        locator = page.locator(selector)
        seen["text"] = (
            locator.first.inner_text()
            if locator.count()
            else f"no {selector} (HTTP {response.status if response else '-'} at {page.url})"
        )
        return expected in seen["text"]

    try:
        _wait(shown, what=f"{expected!r} in {selector} at {address}", logs=logs, timeout=timeout)
    except AssertionError as error:
        raise AssertionError(f"last seen in {selector}: {seen['text'][:500]}\n{error}") from None


def _episodes(url, key, seeds) -> list:
    """The tenant's agent, unmodified: the openai SDK at the gateway's URL with the key, no session calls."""
    agent = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
    episodes = []
    for seed in seeds:
        task = weather.make_tasks(split="train", count=1, seed=seed)[0]
        episode = run_episode(agent, model=MODEL, task=task, max_turns=2, max_tokens=12)
        assert episode.error is None, episode.error
        episodes.append(episode)
    return episodes


def _submit(page, target) -> None:  # noqa: F811
    """Clicks a form's button (a selector or a locator) and waits for the page the server answers with."""
    with page.expect_navigation():
        (page.locator(target) if isinstance(target, str) else target).click()


def _message(page) -> str:  # noqa: F811
    return page.locator(".message").first.inner_text()


def test_an_empty_tenant_reaches_an_approved_canary_through_the_console(
    gateway,  # noqa: F811
    browser,  # noqa: F811
    page,  # noqa: F811
    tenant,
    member,
    default_model_dir,  # noqa: F811
    settings,
    tmp_path,
):
    url, gw = gateway
    admin, operator = member(Role.ADMIN), member(Role.OPERATOR)
    assert not ApiKey.objects.filter(tenant=tenant).exists()
    assert not ModelVersion.objects.filter(tenant=tenant).exists()
    assert not Backend.objects.filter(tenant=tenant).exists()
    # The tenant's base model, dropped into its inbox (an installation's upload path).
    shutil.copytree(default_model_dir, Path(settings.AREAL_MODEL_INBOX_DIR) / tenant.slug / "base")

    with celery_stack(log_dir=tmp_path, env={**STACK_ENV, "AREAL_GATEWAY_URL": url}):
        login(page, url, admin)

        # 1. the admin creates the agent's key
        page.goto(f"{url}/settings/keys/")
        page.fill("#create-key input[name=name]", "my-agent")
        page.check("#create-key input[value=inference]")
        _submit(page, "#create-key button[type=submit]")
        key = page.locator("#new-key").inner_text().strip()

        # 2. registers the base model from the inbox
        page.goto(f"{url}/models/")
        page.fill("#register-model [name=name]", MODEL)
        page.fill("#register-model [name=directory]", "base")
        _submit(page, "#register-model button[type=submit]")
        assert "Registered" in _message(page)
        base = ModelVersion.objects.get(tenant=tenant, name=MODEL)
        assert (base.number, base.status) == (0, "candidate")
        page.shoot("1-model-registered")

        with (
            inference_server(
                base.checkpoint_path, served_model=MODEL, version="0", log_path=tmp_path / "slot-a.log"
            ) as slot_a,
            inference_server(
                base.checkpoint_path, served_model=MODEL, version="0", log_path=tmp_path / "slot-b.log"
            ) as slot_b,
        ):
            # 3. registers the two servers as backends of the model, and checks them
            for name, address in (("slot-a", slot_a), ("slot-b", slot_b)):
                page.goto(f"{url}/backends/")
                form = page.locator("#register-backend")
                form.locator("[name=name]").fill(name)
                form.locator("[name=base_url]").fill(address)
                form.locator("[name=kind]").select_option("embedded")
                form.locator("[name=served_model]").fill(MODEL)
                form.locator("[name=model_version]").fill("0")
                _submit(page, form.locator("button[type=submit]"))
                _submit(
                    page, page.locator("#backends tr", has_text=name).locator("button:has-text('Check now')")
                )
                assert "up" in page.locator("#backends tr", has_text=name).inner_text()
            page.shoot("2-backends")

            # 4. makes v0 production (the Serving page's form for a model's first version)
            page.goto(f"{url}/serving/")
            page.select_option("#production-form [name=version]", str(base.pk))
            _submit(page, "#set-production")
            assert "v0" in page.locator("#routing").inner_text()

            # 5. a short idle timeout, and a rule evaluator as the reward: did the agent's tool calls succeed.
            # The timeout counts from the start of a session's newest stored step, so it must outlast an
            # episode's turn on a loaded machine: a session closed between its turns would go on in a
            # continuation, and the journey's counts would be off.
            page.goto(f"{url}/settings/policy/")
            page.fill("[name=session_idle_seconds]", str(IDLE_SECONDS))
            # The base is a random model: its sampled text can read as a phone number, and the default PII
            # redaction then drops the step's token ids (as it must), which disqualifies the trajectory.
            page.select_option("[name=pii_mode]", "off")
            _submit(page, "button:has-text('Save policy')")
            assert "Policy saved" in _message(page)
            page.goto(f"{url}/reward-specs/")
            form = page.locator("#new-reward-spec")
            form.locator("[name=name]").fill("task-success")
            form.locator("[name=kind]").select_option("numeric")
            form.locator("[name=minimum]").fill("0")
            form.locator("[name=maximum]").fill("1")
            form.locator("[name=is_training_reward]").check()
            _submit(page, form.locator("button[type=submit]"))
            assert "task-success" in page.locator("#reward-specs").inner_text()
            page.goto(f"{url}/evaluators/")
            form = page.locator("#new-evaluator")
            form.locator("[name=name]").fill("tools-succeeded")
            form.locator("[name=kind]").select_option("tool_call_succeeded")
            form.locator("[name=spec]").select_option("task-success")
            form.locator("[name=config]").fill("{}")
            _submit(page, form.locator("button[type=submit]"))
            assert "Registered tools-succeeded" in _message(page)

            # 6. the agent plays; its sessions close as idle, are rewarded and qualify
            _episodes(url, key, seeds=range(3))
            drain(gw)
            _wait(
                lambda: Trajectory.objects.filter(tenant=tenant, status="complete").count() == 3,
                what="three sessions closed as idle",
                logs=tmp_path,
            )
            assert (
                list(Trajectory.objects.filter(tenant=tenant).values_list("end_reason", "continues"))
                == [("idle", None)] * 3
            ), _tenant_state()
            _reload_until(page, f"{url}/training-queue/", "#waiting-total", "3", logs=tmp_path)
            page.goto(f"{url}/trajectories/")
            assert page.locator("#trajectories tbody tr[data-status=complete]").count() == 3
            page.shoot("3-qualified")

            # 7. the operator starts an online run; it learns from the next episodes and registers v1
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            ops = context.new_page()
            ops.on("pageerror", lambda error: page.javascript_errors.append(str(error)))
            login(ops, url, operator)
            ops.goto(f"{url}/training/online/new/")
            ops.select_option("#online-run-form [name=base_version]", str(base.pk))
            ops.fill("#online-run-form [name=samples_per_step]", "2")
            ops.fill("#online-run-form [name=publish_every]", "1")
            ops.fill("#online-run-form [name=max_steps]", "1")
            ops.uncheck("#online-run-form [name=publish_to_backends]")
            _submit(ops, "#start-online-run")
            assert ops.locator("#online-runs tbody tr").count() == 1
            _episodes(url, key, seeds=range(3, 6))
            drain(gw)
            candidate = _wait(
                lambda: ModelVersion.objects.filter(tenant=tenant, name=MODEL, number=1).first(),
                what="the online run to register v1",
                logs=tmp_path,
            )
            _reload_until(
                ops,
                f"{url}/models/",
                f"#versions tr[data-version='{candidate.pk}']",
                "candidate",
                logs=tmp_path,
            )
            ops.screenshot(path=str(ARTIFACTS / "byo-journey-4-v1.png"), full_page=True)

            # 8. evaluates v1: a suite of one case, run against it (the eval worker loads v1 on slot-b)
            ops.goto(f"{url}/evaluation/")
            ops.fill("#suite-form [name=name]", "smoke")
            _submit(ops, "#suite-form button[type=submit]")
            ops.fill("#case-form [name=key]", "answers")
            ops.fill("#case-form [name=user]", "What is the weather in Paris?")
            ops.select_option("#case-form [name=scorer]", "regex")
            ops.fill("#case-form [name=scorer_config]", '{"pattern": "."}')
            _submit(ops, "#case-form button[type=submit]")
            ops.select_option("#run-version", str(candidate.pk))
            _submit(ops, "#run-form button[type=submit]")
            run = EvalRun.objects.get(tenant=tenant)
            _reload_until(ops, f"{url}/evaluation/runs/{run.pk}/", ".status", "succeeded", logs=tmp_path)
            assert Backend.objects.get(tenant=tenant, name="slot-b").model_version == "1"
            assert ops.locator("#results tr[data-case=answers]").count() == 1
            ops.screenshot(path=str(ARTIFACTS / "byo-journey-5-eval.png"), full_page=True)

            # 9. releases v1 through a 50 % canary
            ops.goto(f"{url}/releases/new/")
            ops.select_option("#release-form [name=candidate]", str(candidate.pk))
            ops.fill("#release-form [name=stages]", "50")
            ops.fill("#release-form [name=stage_min_seconds]", "0")
            for index, guardrail in enumerate(GUARDRAILS):  # rows of fields; the defaults' second row emptied
                row = f"#release-form [data-guardrail-row='{index}']"
                ops.select_option(f"{row} [name$=metric]", guardrail["metric"])
                ops.select_option(f"{row} [name$=direction]", guardrail["direction"])
                ops.fill(f"{row} [name$=threshold]", str(guardrail["threshold"]))
                ops.fill(f"{row} [name$=min_samples]", str(guardrail["min_samples"]))
            ops.select_option("#release-form [data-guardrail-row='1'] [name$=metric]", "")
            ops.fill("#release-form [data-guardrail-row='1'] [name$=threshold]", "")
            ops.fill("#release-form [data-guardrail-row='1'] [name$=min_samples]", "")
            _submit(ops, "#create-release")
            release = Release.objects.get(tenant=tenant)
            _submit(ops, "#release-actions button:has-text('Start')")
            _reload_until(ops, f"{url}/releases/{release.pk}/", "#release-status", "Canary", logs=tmp_path)

            # the agent's new sessions split between v0 and v1 until each arm has the guardrail's samples
            started = Release.objects.get(pk=release.pk).canary_started_at
            seed = 100
            while True:
                steps = Step.objects.filter(trajectory__tenant=tenant, created_at__gte=started)
                arms = {number: steps.filter(model_version=number).count() for number in ("0", "1")}
                if min(arms.values()) >= 2:
                    break
                assert seed < 140, f"sessions did not split between the versions: {arms}"
                _episodes(url, key, seeds=[seed])
                drain(gw)
                seed += 1
            _reload_until(
                ops, f"{url}/releases/{release.pk}/", "#release-status", "Awaiting approval", logs=tmp_path
            )
            ops.screenshot(path=str(ARTIFACTS / "byo-journey-6-awaiting-approval.png"), full_page=True)

            # 10. the operator approves the promotion
            ops.once("dialog", lambda dialog: dialog.accept())
            ops.click("#approve")
            ops.wait_for_selector("text=Promoted.")
            assert ops.locator("#release-actions").count() == 0  # nothing left to do on a promoted release
            ops.screenshot(path=str(ARTIFACTS / "byo-journey-7-promoted.png"), full_page=True)
            context.close()

    release.refresh_from_db()
    assert (release.status, release.approved_by) == (ReleaseStatus.PROMOTED, operator.username)
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production").pk == candidate.pk
    assert candidate.parent_id == base.pk
    assert page.javascript_errors == []
