"""A candidate trained into a worse model (it no longer calls the weather tool) is evaluated through the real
gateway, canaried on real gateway traffic, found worse by the reward guardrail and rolled back automatically;
every session then gets the baseline, none fails, and the serving history shows it all."""

import httpx
import pytest

from apps.evaluation.models import EvalRun, RunStatus
from apps.evaluation.selectors import eval_comparison
from apps.evaluation.services import eval_case_create, eval_suite_create
from apps.inference.models import BackendKind, BackendState
from apps.loop.eval_runs import eval_run_execute
from apps.releases.analysis import release_analyze
from apps.releases.models import ReleaseStatus, ServingEvent
from apps.releases.services import release_create, release_start
from apps.training.models import ModelVersion, VersionStatus
from apps.training.services import alias_move, model_version_register
from apps.trajectories.models import Purpose, Step, Trajectory
from tests.gateway.conftest import agent_key, gateway  # noqa: F401  (fixtures)
from tests.gateway.helpers import drain
from tests.inference.factories import BackendFactory
from tests.releases.helpers import SYSTEM
from tests.servers import inference_server
from tests.workers.inference.conftest import (  # noqa: F401  (fixtures)
    WEATHER_QUESTION,
    WEATHER_TOOL,
    default_model_dir,
    tool_model_dir,
)
from workers.inference.modelgen import create_default_model, tokenizer_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "weather"


@pytest.fixture(scope="module")
def weather_servers(tool_model_dir, tmp_path_factory):  # noqa: F811
    """v0: the model that calls the tool; v1: a differently initialised model with the same tokenizer."""
    worse = create_default_model(tmp_path_factory.mktemp("models") / "worse", seed=7)
    logs = tmp_path_factory.mktemp("logs")
    with (
        inference_server(tool_model_dir, served_model=MODEL, version="0", log_path=logs / "v0.log") as good,
        inference_server(worse, served_model=MODEL, version="1", log_path=logs / "v1.log") as bad,
    ):
        yield {"baseline": (good, tool_model_dir), "candidate": (bad, worse)}


def _versions_and_backends(tenant, servers):
    (good_url, good_dir), (bad_url, bad_dir) = servers["baseline"], servers["candidate"]
    assert tokenizer_fingerprint(good_dir) == tokenizer_fingerprint(bad_dir)  # the seed changes weights only
    baseline = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=MODEL,
        checkpoint_path=str(good_dir),
        tokenizer_hash=tokenizer_fingerprint(good_dir),
        status=VersionStatus.PRODUCTION,
    )
    alias_move(tenant=tenant, actor=SYSTEM, name=MODEL, alias="production", version=baseline)
    candidate = model_version_register(
        tenant=tenant,
        actor=SYSTEM,
        name=MODEL,
        checkpoint_path=str(bad_dir),
        tokenizer_hash=tokenizer_fingerprint(bad_dir),
        parent=baseline,
    )
    for version, url in ((baseline, good_url), (candidate, bad_url)):
        BackendFactory(
            tenant=tenant,
            name=f"weather-v{version.number}",
            base_url=url,
            kind=BackendKind.EMBEDDED,
            served_model=MODEL,
            model_version=str(version.number),
            state=BackendState.UP,
        )
    return baseline, candidate


def _ask(client, session_id) -> tuple[int, bool]:
    response = client.post(
        "/v1/chat/completions",
        headers={"X-Session-Id": session_id},
        json={
            "model": MODEL,
            "messages": WEATHER_QUESTION,
            "tools": [WEATHER_TOOL],
            "temperature": 0,
            "max_tokens": 40,
        },
    )
    if response.status_code != 200:
        return response.status_code, False
    calls = response.json()["choices"][0]["message"].get("tool_calls") or []
    return 200, any(call["function"]["name"] == "get_weather" for call in calls)


def test_worse_candidate_is_rolled_back_automatically(
    gateway,
    tenant,
    agent_key,
    weather_servers,
    settings,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    url, gw = gateway
    settings.AREAL_GATEWAY_URL = url
    baseline, candidate = _versions_and_backends(tenant, weather_servers)
    suite = eval_suite_create(tenant=tenant, actor=SYSTEM, name="weather-regression")
    eval_case_create(
        tenant=tenant,
        actor=SYSTEM,
        suite_id=suite.pk,
        key="paris",
        input_messages=WEATHER_QUESTION,
        tools=[WEATHER_TOOL],
        params={"max_tokens": 40},
        scorer="tool_call_match",
        scorer_config={"name": "get_weather", "arguments": {"city": "Paris"}},
    )
    release = release_create(
        tenant=tenant,
        actor=SYSTEM,
        candidate_id=candidate.pk,
        stages=[50, 100],
        eval_suite_ids=[suite.pk],
        guardrails=[
            {"metric": "reward_mean", "direction": "higher_is_better", "threshold": 0.25, "min_samples": 3},
            {"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.2, "min_samples": 3},
        ],
    )
    assert release.baseline_id == baseline.pk  # the production alias

    # Offline: one eval run per arm, executed as the eval worker does, through the gateway.
    with django_capture_on_commit_callbacks(execute=False):
        release = release_start(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    for arm in ("candidate", "baseline"):
        assert eval_run_execute(run_id=release.eval_runs[arm][str(suite.pk)])["status"] == RunStatus.SUCCEEDED
    candidate_run = EvalRun.objects.get(pk=release.eval_runs["candidate"][str(suite.pk)])
    baseline_run = EvalRun.objects.get(pk=release.eval_runs["baseline"][str(suite.pk)])
    assert (candidate_run.summary["pass_rate"], baseline_run.summary["pass_rate"]) == (0.0, 1.0), [
        (result.run_id, result.label, result.error, result.output_text[:80], result.tool_calls)
        for result in baseline_run.results.all()
    ]
    _, _, comparison = eval_comparison(
        tenant=tenant, candidate_run_id=candidate_run.pk, baseline_run_id=baseline_run.pk
    )
    assert comparison.flips.regressed == ("paris",)
    assert comparison.metrics["pass_rate"].difference == -1
    drain(gw)
    evals = Trajectory.objects.filter(tenant=tenant, purpose=Purpose.EVAL)
    assert evals.count() == 2  # recorded, as eval traffic: never trained on
    assert set(Step.objects.filter(trajectory__in=evals).values_list("model_version", flat=True)) == {
        "0",
        "1",
    }
    assert ModelVersion.objects.get(pk=candidate.pk).metrics["eval.weather-regression.pass_rate"] == 0.0

    # Offline evaluation has no eval_score guardrail here, so the candidate goes to the first canary stage.
    release = release_analyze(tenant=tenant, release_id=release.pk)
    assert (release.status, release.stage_percent) == (ReleaseStatus.CANARY, 50.0)
    assert ModelVersion.objects.get(pk=candidate.pk).status == VersionStatus.CANARY

    client = httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {agent_key('inference', 'rewards:write')}"},
        timeout=60,
    )
    sessions = [f"user-{index}" for index in range(16)]
    for session_id in sessions:
        status, called = _ask(client, session_id)
        assert status == 200
        # The agent's environment rewards a session that got its weather lookup.
        assert (
            client.post(
                "/v1/rewards",
                json={"session_id": session_id, "value": 1.0 if called else 0.0, "source": "environment"},
            ).status_code
            == 201
        )
    drain(gw)
    served = dict(
        Step.objects.filter(trajectory__session_id__in=sessions).values_list(
            "trajectory__session_id", "model_version"
        )
    )
    on_candidate = [session for session, version in served.items() if version == "1"]
    assert 0 < len(on_candidate) < len(sessions)

    release = release_analyze(tenant=tenant, release_id=release.pk)
    assert release.status == ReleaseStatus.ROLLED_BACK
    assert "reward_mean" in release.status_reason
    analysis = release.analyses.last()
    reward = next(row for row in analysis.measurements if row["metric"] == "reward_mean")
    assert (reward["candidate"], reward["baseline"], reward["verdict"]) == (0.0, 1.0, "failed")
    assert ModelVersion.objects.get(pk=candidate.pk).status == VersionStatus.ROLLED_BACK

    # Sessions that were on the candidate continue on the baseline; none fails; new sessions get the baseline.
    for session_id in on_candidate[:3] + ["after-rollback-1", "after-rollback-2"]:
        assert _ask(client, session_id) == (200, True)
    drain(gw)
    latest = Step.objects.filter(trajectory__session_id=on_candidate[0]).order_by("-index").first()
    assert latest.model_version == "0"

    history = list(ServingEvent.objects.filter(tenant=tenant, model=MODEL).order_by("at", "id"))
    assert [(event.stable_id, event.canary_id, event.canary_percent) for event in history] == [
        (baseline.pk, candidate.pk, 50.0),
        (baseline.pk, None, 0.0),
    ]
