"""The control plane's four scenarios in short (workers/envs/scenarios.py: tool_failure, drift, bad_release,
stationary), each driven through the real signals (`evolution_tick` with no `signals`, so `signals_compute`
reads the recorded traffic) and the real tick, on trajectories recorded as the gateway records them, for an
automatic policy watching what the demo watches under a scenario (demo.loop `_watching`)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.evolution.decisions import decision_record
from apps.evolution.models import Decision, DecisionStatus, HarnessVersion, SignalPoint, ToolFailureCluster
from apps.loop.actions import harness_run
from apps.loop.control import evolution_tick
from apps.releases.analysis import release_analyze
from apps.releases.approval import release_approve
from apps.releases.models import ReleaseStatus
from apps.releases.services import release_create, release_start
from apps.training.models import ModelVersion, OnlineRun, OnlineRunStatus, VersionStatus
from apps.training.online import online_run_finish, online_run_start
from apps.training.selectors import alias_resolve
from tests.evolution.factories import AutoPolicyFactory
from tests.evolution.helpers import SYSTEM, candidate, production
from tests.releases.helpers import MODEL, release_at, serve_versions
from tests.trajectories.factories import StepFactory, TrajectoryFactory
from workers.envs import weather
from workers.envs.scenarios import ALARM_KINDS, EXTRA_TOOLS, SHIFTED_QUESTION, WEATHER_V2
from workers.evolution.signals import SIGNALS

pytestmark = pytest.mark.django_db

AGENT = "forecaster"
CITIES = ["Paris", "Oslo", "Lima", "Rome"]
FAULTY = {"Oslo", "Lima"}
NEW_CITIES = list(weather.NEW_CITIES)
# What the agent offers under the tool_failure scenario: get_weather_v2 advertised before get_weather.
OFFERED = [EXTRA_TOOLS[WEATHER_V2], *weather.TOOLS]
WINDOW = 60


def _watching(**more) -> dict:
    """The policy demo.loop sets under a scenario: tool failures and drift over a minute, weight and
    harness updates, automatic approval."""
    return {
        "agent_name": AGENT,
        "signals": {
            "tool_failure_rate": {"op": ">", "threshold": 0.15},
            "drift_js": {"op": ">", "threshold": 0.1},
        },
        "update_kinds": ["weights", "harness"],
        "window_seconds": WINDOW,
        "cooldown_seconds": 60,
        **more,
    }


def conversation(
    tenant,
    policy,
    *,
    city,
    at,
    number=0,
    question=weather.QUESTIONS[0],
    prefix="",
    tools=weather.TOOLS,
    answer=None,
    called_city=None,
    version="",
):
    """Two gateway steps of the weather agent: the model calls get_weather(city), then answers once the tool
    message came back (`answer`: what the tool said; by default the temperature)."""
    trajectory = TrajectoryFactory(
        tenant=tenant, steps=0, task_id=f"{prefix}weather-{number}", agent_name=AGENT, started_at=at
    )
    called = called_city or city
    if answer is None:
        answer = weather.tool_result(
            weather.Task(task_id="t", city=city, temperature=21, question=""),
            weather.TOOL_NAME,
            json.dumps({"city": called}),
        )
    opening = [
        {"role": "system", "content": weather.SYSTEM_PROMPT},
        {"role": "user", "content": question.format(city=city)},
    ]
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": weather.TOOL_NAME, "arguments": json.dumps({"city": called})},
    }
    asked = {"role": "assistant", "content": "", "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "call-1", "content": answer}
    StepFactory(
        trajectory=trajectory, index=0, served_model=policy.model, created_at=at, model_version=version,
        observation={"messages": opening, "tools": tools},
        action={"message": asked, "tool_calls": [call], "text": ""},
    )  # fmt: skip
    StepFactory(
        trajectory=trajectory, index=1, served_model=policy.model, created_at=at + timedelta(seconds=1),
        model_version=version, observation={"messages": [*opening, asked, result], "tools": tools},
        action={"message": {"role": "assistant", "content": "21"}, "tool_calls": [], "text": "21"},
    )  # fmt: skip
    return trajectory


def traffic(tenant, policy, *, start, count=12, cities=CITIES, **kwargs):
    """`count` conversations from `start` on, three seconds apart, the cities taken in turn."""
    return [
        conversation(
            tenant,
            policy,
            city=cities[index % len(cities)],
            at=start + timedelta(seconds=3 * index),
            number=index,
            **kwargs,
        )
        for index in range(count)
    ]


def _offline(city: str) -> str | None:
    """get_weather under the scenario's tool_faults: an offline station for the faulty cities."""
    return json.dumps({"error": f"station {city} offline"}) if city in FAULTY else None


def failing_traffic(tenant, policy, *, start, count=12, tools=OFFERED):
    return [
        conversation(
            tenant,
            policy,
            city=city,
            at=start + timedelta(seconds=3 * index),
            number=index,
            tools=tools,
            answer=_offline(city),
        )
        for index, city in enumerate(CITIES[index % len(CITIES)] for index in range(count))
    ]


def _decisions(policy, kind=None):
    rows = Decision.objects.filter(policy=policy).order_by("id")
    return list(rows.filter(kind=kind) if kind else rows)


def _promoted_after_reference(tenant, policy, **traffic_kwargs):
    """Reference traffic in the minute before production v0 is promoted (the drift's reference), then v0."""
    before = timezone.now() - timedelta(seconds=WINDOW - 5)
    traffic(tenant, policy, start=before, count=12, **traffic_kwargs)
    return production(tenant, policy)


# ---- (a) tool_failure ---------------------------------------------------------------------------------------


def test_tool_failure_routes_the_failing_tool_to_its_v2_in_a_harness_candidate(tenant):
    policy = AutoPolicyFactory(tenant=tenant, **_watching())
    base = production(tenant, policy)
    # Decisions are stamped by the wall clock (the cool-down counts from them): the scenario is laid out in
    # the minutes before now, so that the tick that fires is now and the one right after is seconds later.
    now = timezone.now()
    traffic(tenant, policy, start=now - timedelta(seconds=170), tools=OFFERED)
    calm = evolution_tick(tenant=tenant, policy=policy, now=now - timedelta(seconds=130))
    assert calm.signals["tool_failure_rate"] == 0
    assert calm.recorded == []

    failing = failing_traffic(tenant, policy, start=now - timedelta(seconds=55))
    fired = evolution_tick(tenant=tenant, policy=policy, now=now)
    assert fired.signals["tool_failure_rate"] == pytest.approx(0.5)
    assert fired.signals["drift_js"] < 0.1  # the same questions: only the tool changed
    (cluster,) = ToolFailureCluster.objects.filter(policy=policy)
    assert (cluster.tool, cluster.kind, cluster.count) == (weather.TOOL_NAME, "failed_result", 6)
    # Regression: one cluster for every offline station (the city, an argument of the call, is taken out).
    assert cluster.signature == "station <s> offline"
    assert set(cluster.examples) <= {str(trajectory.id) for trajectory in failing}
    (update,) = fired.recorded
    assert update.kind == "update_harness"
    assert update.evidence["clusters"] == [cluster.pk]
    assert update.evidence["tools"] == [weather.TOOL_NAME]
    assert update.evidence["signals"]["tool_failure_rate"]["value"] == pytest.approx(0.5)
    update.refresh_from_db()
    assert update.status == DecisionStatus.RUNNING  # the tick started it; the proposer runs on the eval queue

    assert harness_run(tenant_id=tenant.pk, decision_id=update.pk).endswith("as v1")
    update.refresh_from_db()
    assert update.status == DecisionStatus.SUCCEEDED
    harness = HarnessVersion.objects.get(tenant=tenant, model=policy.model)
    assert harness.tool_routing == {weather.TOOL_NAME: {"action": "route", "to": WEATHER_V2, "version": "2"}}
    version = ModelVersion.objects.get(tenant=tenant, name=policy.model, harness=harness)
    assert version.weights_of == base
    assert version.status == VersionStatus.CANDIDATE
    assert update.version == version
    assert update.started["versions"] == [version.pk]
    (evaluate,) = _decisions(policy, "evaluate")
    assert (evaluate.parent, evaluate.version, evaluate.harness) == (update, version, harness)

    # Right after: the stations are still offline, but within the cool-down no second update is proposed.
    failing_traffic(tenant, policy, start=now + timedelta(seconds=1), count=4)
    again = evolution_tick(tenant=tenant, policy=policy, now=now + timedelta(seconds=15))
    assert again.signals["tool_failure_rate"] > 0.15
    assert [decision.kind for decision in again.recorded] == []
    assert len(_decisions(policy, "update_harness")) == 1
    assert HarnessVersion.objects.filter(tenant=tenant).count() == 1


def test_tool_failure_without_harness_updates_rolls_production_back_to_its_previous_version(tenant):
    policy = AutoPolicyFactory(tenant=tenant, **_watching(model=MODEL, update_kinds=["weights"]))
    release = release_at(tenant, ReleaseStatus.AWAITING_APPROVAL, stage_index=0)
    release_approve(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    previous, promoted = release.baseline, release.candidate
    promoted.refresh_from_db()
    assert promoted.status == VersionStatus.PRODUCTION
    start = timezone.now()  # the stations go offline after the promotion
    failing_traffic(tenant, policy, start=start + timedelta(seconds=5))
    result = evolution_tick(tenant=tenant, policy=policy, now=start + timedelta(seconds=50))
    (rollback,) = result.recorded
    assert rollback.kind == "rollback"
    assert "began failing after the last promotion" in rollback.reason
    rollback.refresh_from_db()
    assert rollback.status == DecisionStatus.SUCCEEDED
    assert rollback.outcome == f"production rolled back from v{promoted.number} to v{previous.number}"
    assert rollback.started == {"versions": [previous.pk]}
    assert alias_resolve(tenant=tenant, name=MODEL, alias="production") == previous
    previous.refresh_from_db()
    promoted.refresh_from_db()
    assert (previous.status, promoted.status) == (VersionStatus.PRODUCTION, VersionStatus.ROLLED_BACK)
    assert not HarnessVersion.objects.exists()
    assert _decisions(policy, "update_harness") == []


# ---- (b) drift ----------------------------------------------------------------------------------------------


def test_drift_in_phrasing_and_cities_trains_from_production_and_the_same_traffic_does_not(tenant):
    policy = AutoPolicyFactory(tenant=tenant, **_watching())
    base = _promoted_after_reference(tenant, policy)
    start = timezone.now()
    traffic(tenant, policy, start=start + timedelta(seconds=2))
    same = evolution_tick(tenant=tenant, policy=policy, now=start + timedelta(seconds=40))
    assert same.signals["drift_js"] == pytest.approx(0.0, abs=1e-9)
    assert same.recorded == []
    assert not OnlineRun.objects.filter(tenant=tenant).exists()

    traffic(
        tenant,
        policy,
        start=start + timedelta(seconds=70),
        cities=NEW_CITIES,
        question=SHIFTED_QUESTION,
        prefix="shifted-",
    )
    shifted = evolution_tick(tenant=tenant, policy=policy, now=start + timedelta(seconds=110))
    assert shifted.signals["drift_js"] > 0.1
    point = SignalPoint.objects.filter(policy=policy, name="drift_js").order_by("-at").first()
    assert point.details["reference"] == "before_promotion"
    assert point.details["reference_size"] == 12
    (train,) = shifted.recorded
    assert train.kind == "train"
    assert train.evidence["signals"]["drift_js"]["value"] == pytest.approx(shifted.signals["drift_js"])
    train.refresh_from_db()
    assert train.status == DecisionStatus.SUCCEEDED
    run = OnlineRun.objects.get(tenant=tenant)
    assert train.started == {"online_runs": [run.pk]}
    assert (run.base_version, run.status, run.publish_to_backends) == (base, OnlineRunStatus.RUNNING, False)
    # The learner runs: the drift still there trains no second one.
    traffic(tenant, policy, start=start + timedelta(seconds=111), count=4, cities=NEW_CITIES)
    assert evolution_tick(tenant=tenant, policy=policy, now=start + timedelta(seconds=125)).recorded == []
    assert OnlineRun.objects.filter(tenant=tenant).count() == 1


# ---- (c) bad_release ----------------------------------------------------------------------------------------

GUARDRAIL = {"metric": "error_rate", "direction": "lower_is_better", "threshold": 0.05, "min_samples": 10}


def _canary_calls(tenant, policy, *, version, error, count=10):
    now = timezone.now()
    for index in range(count):
        trajectory = conversation(
            tenant, policy, city=CITIES[index % 4], at=now + timedelta(seconds=index), version=version
        )
        trajectory.steps.update(error=error)


def test_a_release_rolled_back_by_its_guardrails_restarts_the_learner_from_production(tenant):
    plan = {"stages": [50], "stage_min_seconds": 60, "guardrails": [GUARDRAIL], "failure_limit": 0}
    policy = AutoPolicyFactory(tenant=tenant, **_watching(release_plan=plan))
    base = production(tenant, policy)
    learner = online_run_start(tenant=tenant, actor=SYSTEM, base_version=base, publish_to_backends=False)
    degraded = candidate(tenant, base, checkpoint="/models/degraded")
    serve_versions(tenant, base, degraded)  # the two serving slots, as the demo loads them
    # As the demo's bad_release: a release decision of the degraded copy, its release started by the services.
    release = release_create(
        tenant=tenant, actor=SYSTEM, candidate_id=degraded.pk, baseline_id=base.pk, **plan
    )
    release_start(tenant=tenant, actor=SYSTEM, release_id=release.pk)
    assert release_analyze(tenant=tenant, release_id=release.pk).status == ReleaseStatus.CANARY
    decision = decision_record(
        tenant=tenant, policy=policy, kind="release", reason="bad_release", actor=SYSTEM, version=degraded
    )
    Decision.objects.filter(pk=decision.pk).update(
        status=DecisionStatus.RUNNING, started={"releases": [release.pk]}
    )
    _canary_calls(tenant, policy, version=str(degraded.number), error="backend error: garbage output")
    _canary_calls(tenant, policy, version=str(base.number), error="")
    release = release_analyze(tenant=tenant, release_id=release.pk)
    assert release.status == ReleaseStatus.ROLLED_BACK
    assert release.status_reason.startswith("guardrail failed: error_rate")

    later = timezone.now() + timedelta(seconds=20)
    result = evolution_tick(tenant=tenant, policy=policy, now=later)
    assert [row.kind for row in result.recorded] == ["rollback", "restart_learner"]
    rollback, restart = (Decision.objects.get(pk=row.pk) for row in result.recorded)
    assert rollback.status == DecisionStatus.SUCCEEDED  # done already, by the release's guardrails
    assert rollback.evidence["release"] == release.pk
    assert rollback.evidence["release_status"] == ReleaseStatus.ROLLED_BACK
    assert restart.status == DecisionStatus.RUNNING  # the learner was asked to stop
    decision.refresh_from_db()
    assert decision.status == DecisionStatus.FAILED
    assert "rolled back" in decision.outcome
    learner.refresh_from_db()
    assert learner.stop_requested
    online_run_finish(run_id=learner.pk, status=OnlineRunStatus.STOPPED)

    for tick in range(1, 4):  # until the new learner exists
        evolution_tick(tenant=tenant, policy=policy, now=later + timedelta(seconds=10 * tick))
        restart.refresh_from_db()
        if restart.status != DecisionStatus.RUNNING:
            break
    assert restart.status == DecisionStatus.SUCCEEDED
    second = OnlineRun.objects.get(tenant=tenant, status=OnlineRunStatus.RUNNING)
    assert second.base_version == base
    assert restart.started["online_runs"] == [learner.pk, second.pk]
    assert len(_decisions(policy, "rollback")) == 1
    assert len(_decisions(policy, "restart_learner")) == 1


# ---- (d) stationary -----------------------------------------------------------------------------------------


def stationary_traffic(tenant, policy, *, start, count=20):
    """One distribution: the same cities and phrasing; one call in twenty asks the wrong city's station (the
    normal ~5 % failure rate of the weather agent)."""
    for index in range(count):
        city = CITIES[index % len(CITIES)]
        conversation(
            tenant,
            policy,
            city=city,
            at=start + timedelta(seconds=2 * index),
            number=index,
            called_city="Lyon" if index == count - 1 else None,
        )


def test_stationary_traffic_records_no_decision_and_a_signal_point_every_tick(tenant):
    policy = AutoPolicyFactory(tenant=tenant, **_watching())
    _promoted_after_reference(tenant, policy)
    start = timezone.now()
    ticks = 4
    for tick in range(ticks):
        begin = start + timedelta(seconds=WINDOW * tick)
        stationary_traffic(tenant, policy, start=begin + timedelta(seconds=1))
        result = evolution_tick(tenant=tenant, policy=policy, now=begin + timedelta(seconds=WINDOW))
        assert result.signals["tool_failure_rate"] == pytest.approx(0.05)
        assert result.recorded == []
    false_alarms = Decision.objects.filter(policy=policy, kind__in=ALARM_KINDS).count()
    assert false_alarms == 0
    assert _decisions(policy) == []
    assert SignalPoint.objects.filter(policy=policy).count() == ticks * len(SIGNALS)
    drift = SignalPoint.objects.filter(policy=policy, name="drift_js").order_by("at")
    assert [point.value is not None and point.value < 0.1 for point in drift] == [True] * ticks
    assert not OnlineRun.objects.filter(tenant=tenant).exists()
