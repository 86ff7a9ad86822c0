"""signals_compute over stored traffic: tool-failure clusters (and no double counting across ticks), drift
against production's training trajectories, user feedback rates, versions, and tenant isolation."""

import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from apps.evolution.models import SignalPoint, ToolFailureCluster
from apps.evolution.selectors import clusters_list, signal_series
from apps.evolution.signals import signals_compute
from apps.metrics.publish import stream_group
from apps.rewards.models import RewardKind, RewardSource
from apps.trajectories.models import Purpose
from tests.evolution.factories import EvolutionPolicyFactory
from tests.qualification.factories import QualificationFactory
from tests.rewards.factories import RewardFactory
from tests.training.factories import ModelVersionFactory
from tests.trajectories.factories import StepFactory, TrajectoryFactory
from workers.evolution.signals import SIGNALS

MODEL = "weather-model"
AGENT = "forecaster"
CITIES = ["Paris", "Rome", "Oslo", "Madrid"]
FAILING = {"Lima", "Quito"}


def _weather(city: str) -> str:
    if city in FAILING:
        return json.dumps({"error": f"unknown city '{city}' (code 404)"})
    return json.dumps({"city": city, "temperature": 21})


def conversation(
    tenant, *, city, at, task=None, model=MODEL, agent=AGENT, purpose=Purpose.PRODUCTION, **step
):
    """Two gateway steps: the model calls `weather(city)`, then answers once the tool message came back."""
    trajectory = TrajectoryFactory(
        tenant=tenant, steps=0, task_id=task or f"weather-{city.lower()}-1", agent_name=agent,
        started_at=at, purpose=purpose,
    )  # fmt: skip
    question = {"role": "user", "content": f"What is the weather in {city} today?"}
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps({"city": city})},
    }
    asked = {"role": "assistant", "content": "", "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "call-1", "content": _weather(city)}
    StepFactory(
        trajectory=trajectory, index=0, served_model=model, created_at=at, latency_ms=100,
        observation={"messages": [question]},
        action={"message": asked, "tool_calls": [call], "text": ""},
    )  # fmt: skip
    StepFactory(
        trajectory=trajectory, index=1, served_model=model, created_at=at + timedelta(seconds=1), latency_ms=300,
        observation={"messages": [question, asked, answer]},
        action={"message": {"role": "assistant", "content": "Sunny"}, "tool_calls": [], "text": "Sunny"},
        **step,
    )  # fmt: skip
    return trajectory


@pytest.fixture
def policy(tenant):
    return EvolutionPolicyFactory(tenant=tenant, model=MODEL, agent_name=AGENT, window_seconds=600)


def _point(policy, name):
    return SignalPoint.objects.filter(policy=policy, name=name).order_by("-at", "-id").first()


def test_a_tool_failing_for_some_cities_becomes_one_cluster(tenant, policy):
    now = timezone.now()
    for index, city in enumerate(CITIES * 2):
        conversation(tenant, city=city, at=now - timedelta(seconds=300 - index))
    failing = [
        conversation(tenant, city=city, at=now - timedelta(seconds=200 - index))
        for index, city in enumerate(["Lima", "Quito", "Lima"])
    ]
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert set(values) == set(SIGNALS)
    assert values["tool_failure_rate"] == pytest.approx(3 / 11)
    assert _point(policy, "tool_failure_rate").details["failed"] == 3
    (found,) = clusters_list(tenant=tenant, policy=policy)
    assert found.tool == "weather"
    assert found.kind == "failed_result"
    assert found.signature == "unknown city '<s>' (code <n>)"
    assert found.argument_shape == "{city:str}"
    assert found.count == 3
    assert found.examples == [str(trajectory.id) for trajectory in failing]
    assert found.example_arguments == ['{"city": "Quito"}', '{"city": "Lima"}']
    assert found.last_seen == failing[-1].started_at + timedelta(seconds=1)
    assert values["latency_p95_ms"] == pytest.approx(300)
    assert SignalPoint.objects.filter(policy=policy).count() == len(SIGNALS)


def test_a_second_tick_counts_only_newer_failures(tenant, policy):
    now = timezone.now()
    conversation(tenant, city="Lima", at=now - timedelta(seconds=100))
    signals_compute(tenant=tenant, policy=policy, now=now)
    signals_compute(tenant=tenant, policy=policy, now=now + timedelta(seconds=30))
    assert ToolFailureCluster.objects.get(policy=policy).count == 1
    newer = conversation(tenant, city="Quito", at=now + timedelta(seconds=40))
    signals_compute(tenant=tenant, policy=policy, now=now + timedelta(seconds=60))
    found = ToolFailureCluster.objects.get(policy=policy)
    assert found.count == 2
    assert found.examples[-1] == str(newer.id)
    assert len(signal_series(tenant=tenant, policy=policy, name="tool_failure_rate")) == 3


def _production_trained_on(tenant, trajectories):
    return ModelVersionFactory(
        tenant=tenant, name=MODEL, number=1, status="production",
        dataset_snapshot={"trajectory_ids": [str(trajectory.id) for trajectory in trajectories]},
    )  # fmt: skip


def test_shifted_cities_and_tasks_drift_and_the_same_traffic_does_not(tenant, policy):
    now = timezone.now()
    earlier = now - timedelta(days=1)
    trained = [
        conversation(tenant, city=CITIES[index % 4], at=earlier + timedelta(seconds=index))
        for index in range(24)
    ]
    _production_trained_on(tenant, trained)
    for index in range(12):
        conversation(tenant, city=CITIES[index % 4], at=now - timedelta(seconds=500 - index))
    same = signals_compute(tenant=tenant, policy=policy, now=now)
    assert same["drift_js"] < 0.1
    assert _point(policy, "drift_js").details["reference"] == "training_snapshot"
    assert _point(policy, "drift_js").details["reference_size"] == 24

    later = now + timedelta(hours=1)
    for index in range(12):
        city = ["Lima", "Quito", "Bogota"][index % 3]
        conversation(tenant, city=city, task=f"trip-{index}", at=later - timedelta(seconds=500 - index))
    shifted = signals_compute(tenant=tenant, policy=policy, now=later)
    assert shifted["drift_js"] > 0.1
    details = _point(policy, "drift_js").details
    assert details["by_feature"]["task_prefix"]["js"] == 1
    assert details["by_feature"]["words"]["js"] > 0.1
    assert details["current_size"] == 12


def test_without_a_training_snapshot_the_reference_is_the_window_before_promotion(tenant, policy):
    from apps.audit.services import Actor
    from apps.training.services import alias_move

    promoted = timezone.now()
    for index in range(8):
        conversation(tenant, city=CITIES[index % 4], at=promoted - timedelta(seconds=400 - index))
    version = ModelVersionFactory(tenant=tenant, name=MODEL, number=0, status="production")
    alias_move(tenant=tenant, actor=Actor.system("test"), name=MODEL, alias="production", version=version)
    later = promoted + timedelta(hours=2)
    for index in range(8):
        conversation(tenant, city=CITIES[index % 4], at=later - timedelta(seconds=400 - index))
    values = signals_compute(tenant=tenant, policy=policy, now=later)
    details = _point(policy, "drift_js").details
    assert details["reference"] == "before_promotion"
    assert details["reference_size"] == 8
    assert values["drift_js"] < 0.1
    assert values["production_version"] == 0


def test_no_production_version_means_no_drift_value(tenant, policy):
    now = timezone.now()
    conversation(tenant, city="Paris", at=now - timedelta(seconds=10))
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert values["drift_js"] is None
    assert values["production_version"] is None
    assert values["staleness_versions"] is None
    assert _point(policy, "drift_js").value is None


def test_thumbs_down_and_correction_rates(tenant, policy):
    now = timezone.now()
    conversations = [
        conversation(tenant, city="Paris", at=now - timedelta(seconds=60 + index)) for index in range(4)
    ]
    votes = [1, 0, 0, 1]
    for trajectory, vote in zip(conversations, votes, strict=True):
        RewardFactory(trajectory=trajectory, kind=RewardKind.BOOLEAN, value=vote, source=RewardSource.USER)
    RewardFactory(trajectory=conversations[1], kind=RewardKind.CRITIQUE, value=0, source=RewardSource.USER)
    RewardFactory(trajectory=conversations[0], value=0.8, source=RewardSource.EVALUATOR)
    RewardFactory(trajectory=conversations[2], value=0.2, source=RewardSource.EVALUATOR)
    values = signals_compute(tenant=tenant, policy=policy, now=now + timedelta(seconds=1))
    assert values["thumbs_down_rate"] == pytest.approx(0.5)
    assert values["correction_rate"] == pytest.approx(0.25)
    assert values["evaluator_score"] == pytest.approx(0.5)
    # per trajectory (critiques left out): 0.9, 0, 0.1, 1 → two of four reach 0.5
    assert values["task_success"] == pytest.approx(0.5)
    assert values["reward_mean"] == pytest.approx((1 + 0 + 0 + 1 + 0.8 + 0.2) / 6)
    by_source = _point(policy, "reward_mean").details["by_source"]
    assert by_source["evaluator"] == {"mean": pytest.approx(0.5), "count": 2}
    assert _point(policy, "thumbs_down_rate").details["votes"] == 4


def test_versions_volume_and_safety(tenant, policy):
    now = timezone.now()
    ModelVersionFactory(tenant=tenant, name=MODEL, number=2, status="production")
    ModelVersionFactory(tenant=tenant, name=MODEL, number=5, status="candidate")
    kept = conversation(tenant, city="Paris", at=now - timedelta(seconds=30), pii_entities=["EMAIL"])
    conversation(
        tenant, city="Rome", at=now - timedelta(seconds=20),
        result={"finish_reason": "content_filter"},
    )  # fmt: skip
    QualificationFactory(trajectory=kept, qualified=True)
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert values["production_version"] == 2
    assert values["staleness_versions"] == 3
    assert values["qualified_volume"] == 1
    assert values["safety_events"] == pytest.approx(100.0)  # two flagged steps, two trajectories
    details = _point(policy, "safety_events").details
    assert details["pii"] == 1
    assert details["refusals"] == 1


def test_another_tenants_traffic_never_counts(tenant, other_tenant, policy):
    now = timezone.now()
    conversation(tenant, city="Paris", at=now - timedelta(seconds=30))
    for index in range(5):
        trajectory = conversation(other_tenant, city="Lima", at=now - timedelta(seconds=40 + index))
        RewardFactory(trajectory=trajectory, kind=RewardKind.BOOLEAN, value=0, source=RewardSource.USER)
    EvolutionPolicyFactory(tenant=other_tenant, model=MODEL, agent_name=AGENT)
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert values["tool_failure_rate"] == 0
    assert values["thumbs_down_rate"] is None
    assert not ToolFailureCluster.objects.exists()
    assert _point(policy, "safety_events").details["trajectories"] == 1


def test_other_agents_models_and_purposes_are_not_the_policys_traffic(tenant, policy):
    now = timezone.now()
    conversation(tenant, city="Lima", at=now - timedelta(seconds=30), agent="someone-else")
    conversation(tenant, city="Lima", at=now - timedelta(seconds=30), model="other-model")
    conversation(tenant, city="Lima", at=now - timedelta(seconds=30), purpose=Purpose.EVAL)
    conversation(tenant, city="Lima", at=now - timedelta(seconds=3000))  # before the window
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert values["tool_failure_rate"] is None
    assert values["latency_p95_ms"] is None
    assert not ToolFailureCluster.objects.exists()


def test_signals_and_new_clusters_are_published_on_the_evolution_stream(
    tenant, policy, django_capture_on_commit_callbacks
):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(stream_group(tenant_id=tenant.pk, stream="evolution"), channel)
    now = timezone.now()
    conversation(tenant, city="Lima", at=now - timedelta(seconds=30))
    with django_capture_on_commit_callbacks(execute=True):
        values = signals_compute(tenant=tenant, policy=policy, now=now)
    first = async_to_sync(layer.receive)(channel)["payload"]
    second = async_to_sync(layer.receive)(channel)["payload"]
    assert first == {"type": "signals", "policy": policy.pk, "at": now.isoformat(), "values": values}
    assert second["type"] == "cluster"
    assert second["count"] == 1
    assert second["tool"] == "weather"


def test_imported_tool_results_and_malformed_calls(tenant, policy):
    now = timezone.now()
    trajectory = TrajectoryFactory(
        tenant=tenant, steps=0, agent_name=AGENT, started_at=now - timedelta(seconds=60)
    )
    calls = [
        {"id": "a", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
        {"id": "b", "type": "function", "function": {"name": "weather", "arguments": "{city: Lima"}},
    ]
    StepFactory(
        trajectory=trajectory, index=0, served_model=MODEL, created_at=now - timedelta(seconds=60),
        action={"tool_calls": calls, "text": ""},
    )  # fmt: skip
    StepFactory(
        trajectory=trajectory, index=1, served_model=MODEL, created_at=now - timedelta(seconds=59),
        result={"finish_reason": "stop", "tool_results": [{"tool_call_id": "a", "error": "quota exceeded"}]},
    )  # fmt: skip
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    assert values["tool_failure_rate"] == 1
    assert _point(policy, "tool_failure_rate").details["malformed_calls"] == 1
    found = {(row.tool, row.kind): row for row in clusters_list(tenant=tenant, policy=policy)}
    assert found["search", "failed_result"].signature == "quota exceeded"
    assert found["weather", "malformed_call"].argument_shape == "<invalid json>"
    assert found["weather", "malformed_call"].example_arguments == ["{city: Lima"]


def test_a_tick_reads_a_fixed_number_of_queries(tenant, policy, django_assert_max_num_queries):
    now = timezone.now()
    _production_trained_on(tenant, [conversation(tenant, city="Paris", at=now - timedelta(days=1))])
    for index in range(3):
        conversation(tenant, city="Paris", at=now - timedelta(seconds=100 + index))
    with django_assert_max_num_queries(40) as few:
        signals_compute(tenant=tenant, policy=policy, now=now)
    for index in range(30):
        trajectory = conversation(tenant, city=CITIES[index % 4], at=now - timedelta(seconds=200 + index))
        RewardFactory(
            trajectory=trajectory, kind=RewardKind.BOOLEAN, value=index % 2, source=RewardSource.USER
        )
    with django_assert_max_num_queries(len(few.captured_queries)):
        signals_compute(tenant=tenant, policy=policy, now=now)


def test_a_version_that_served_before_any_traffic_is_compared_with_the_first_window_it_served(tenant, policy):
    from apps.audit.services import Actor
    from apps.training.models import AliasMove
    from apps.training.services import alias_move

    version = ModelVersionFactory(tenant=tenant, name=MODEL, number=0, status="production")
    alias_move(tenant=tenant, actor=Actor.system("test"), name=MODEL, alias="production", version=version)
    now = timezone.now()
    promoted = now - timedelta(hours=1)  # a first version: production before the agent's first request
    AliasMove.objects.filter(tenant=tenant).dangerously_writable().update(moved_at=promoted)
    for index in range(12):  # the first window it served (600 s), then the same kind of traffic
        conversation(tenant, city=CITIES[index % 4], at=promoted + timedelta(seconds=30 + index))
    for index in range(12):
        conversation(tenant, city=CITIES[index % 4], at=now - timedelta(seconds=300 - index))
    values = signals_compute(tenant=tenant, policy=policy, now=now)
    details = _point(policy, "drift_js").details
    assert (details["reference"], details["reference_size"]) == ("first_served", 12)
    assert values["drift_js"] < 0.1
    later = now + timedelta(minutes=20)
    for index in range(12):
        conversation(
            tenant, city=["Lima", "Quito", "Bogota"][index % 3], at=later - timedelta(seconds=300 - index)
        )
    assert signals_compute(tenant=tenant, policy=policy, now=later)["drift_js"] > 0.1


def test_drift_leaves_out_what_a_harness_added_to_the_prompt():
    from apps.evolution.signals import traffic_samples

    question = {"role": "user", "content": "Oslo: what is the temperature now?"}
    exemplar = [
        {"role": "user", "content": "Lima: what is the temperature now?"},
        {"role": "assistant", "content": "9"},
    ]
    plain = {
        "trajectory_id": "a",
        "index": 0,
        "observation": {"messages": [question]},
        "action": {},
        "state": {},
    }
    harnessed = {
        "trajectory_id": "b",
        "index": 0,
        "observation": {"messages": [{"role": "system", "content": "Use v2."}, *exemplar, question]},
        "action": {},
        "state": {"prompt_version": "h1"},
    }
    rows = [{"id": "a", "task_id": "t"}, {"id": "b", "task_id": "t"}]
    first, second = traffic_samples(rows, [plain, harnessed], {"h1": 2})
    assert (first.prompt_chars, first.first_user_text) == (second.prompt_chars, second.first_user_text)


def test_the_signal_history_stays_bounded_however_many_ticks(
    tenant, policy, other_tenant, monkeypatch, api_client
):
    """Each tick adds a point per signal; the history keeps the newest SIGNAL_POINTS_KEPT of each signal of
    each policy (another policy's, another tenant's series are untouched), and the REST series is the newest."""
    import apps.evolution.signals as signals_module

    monkeypatch.setattr(signals_module, "SIGNAL_POINTS_KEPT", 5)
    theirs = EvolutionPolicyFactory(tenant=other_tenant, model=MODEL, agent_name=AGENT)
    start = timezone.now()
    signals_compute(tenant=other_tenant, policy=theirs, now=start)
    for tick in range(12):
        signals_compute(tenant=tenant, policy=policy, now=start + timedelta(seconds=30 * tick))
    for name in SIGNALS:
        series = SignalPoint.objects.filter(policy=policy, name=name).order_by("at")
        assert series.count() == 5
        assert series.first().at == start + timedelta(seconds=30 * 7)  # the newest five: ticks 7 to 11
    assert SignalPoint.objects.filter(policy=theirs).count() == len(SIGNALS)
    listed = api_client().get(f"/api/v1/evolution/policies/{policy.pk}/signals/?name=reward_mean").json()
    assert len(listed["results"]) == 5
