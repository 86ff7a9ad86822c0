"""The control plane's Celery tasks: the beat fans out one `evolution.tick_policy` task per enabled policy,
each ticks its policy under its own row lock, once per message, within time limits, and a hostile tool
result (megabytes that the old quoted-string pattern read quadratically) does not stall a tick."""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.evolution import tasks
from apps.evolution.models import EvolutionPolicy, ToolFailureCluster
from areal_web.celery import app
from areal_web.queues import TASK_QUEUES, Queue
from tests.evolution.factories import AutoPolicyFactory, EvolutionPolicyFactory
from tests.trajectories.factories import StepFactory, TrajectoryFactory

pytestmark = pytest.mark.django_db
MODEL = "weather-model"
AGENT = "forecaster"


def _last_tick(policy):
    return EvolutionPolicy.objects.get(pk=policy.pk).last_tick_at


def test_the_beat_enqueues_one_tick_per_enabled_policy_and_ticks_none_itself(
    tenant, other_tenant, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        tasks.tick_policy, "apply_async", lambda args, kwargs: sent.append((tuple(args), kwargs))
    )
    ticking = [AutoPolicyFactory(tenant=tenant), AutoPolicyFactory(tenant=other_tenant, mode="observe")]
    resting = AutoPolicyFactory(tenant=tenant, enabled=False)

    assert tasks.tick() == 2

    assert sorted(args for args, _ in sent) == sorted((policy.tenant_id, policy.pk) for policy in ticking)
    assert all(kwargs["enqueued_at"] for _, kwargs in sent)
    assert [_last_tick(policy) for policy in [*ticking, resting]] == [None, None, None]


def test_a_policy_task_ticks_its_policy_once_per_message(tenant, other_tenant):
    policy = AutoPolicyFactory(tenant=tenant)
    other = AutoPolicyFactory(tenant=other_tenant)
    enqueued_at = timezone.now().isoformat()

    assert tasks.tick_policy.apply(args=[tenant.pk, policy.pk], kwargs={"enqueued_at": enqueued_at}).get()
    ticked_at = _last_tick(policy)
    assert ticked_at is not None
    assert _last_tick(other) is None

    # The same message delivered again (or a backlog of beats behind a slow tick): not ticked again.
    assert not tasks.tick_policy.apply(args=[tenant.pk, policy.pk], kwargs={"enqueued_at": enqueued_at}).get()
    assert _last_tick(policy) == ticked_at
    # Another tenant's id with this policy: nothing ticks; a disabled policy: nothing ticks.
    assert not tasks.tick_policy.apply(args=[other_tenant.pk, policy.pk]).get()
    EvolutionPolicy.objects.filter(pk=other.pk).update(enabled=False)
    assert not tasks.tick_policy.apply(args=[other_tenant.pk, other.pk]).get()
    assert _last_tick(policy) == ticked_at
    assert _last_tick(other) is None


def test_the_tick_tasks_have_queues_and_time_limits(settings):
    assert settings.CELERY_BEAT_SCHEDULE["evolution-tick"]["task"] == "evolution.tick"
    for name in ("evolution.tick", "evolution.tick_policy"):
        task = app.tasks[name]
        assert TASK_QUEUES[name] == Queue.DEFAULT
        assert 0 < task.soft_time_limit < task.time_limit <= 300


def _failing_call(tenant, *, at, result: str, number: int):
    """A trajectory whose model calls `weather` and gets `result` back as the tool message."""
    trajectory = TrajectoryFactory(
        tenant=tenant, steps=0, task_id=f"weather-{number}", agent_name=AGENT, started_at=at
    )
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    asked = {"role": "assistant", "content": "", "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "c1", "content": result}
    StepFactory(
        trajectory=trajectory, index=0, served_model=MODEL, created_at=at,
        observation={"messages": [question]}, action={"message": asked, "tool_calls": [call], "text": ""},
    )  # fmt: skip
    StepFactory(
        trajectory=trajectory, index=1, served_model=MODEL, created_at=at + timedelta(seconds=1),
        observation={"messages": [question, asked, answer]},
        action={"message": {"role": "assistant", "content": "Sorry"}, "tool_calls": [], "text": "Sorry"},
    )  # fmt: skip


def test_a_hostile_tool_result_does_not_stall_the_tick(tenant):
    """2 MiB of `"\\` after "Error:" (a quote that never closes, at every other character): the old pattern
    read to the end again from each quote, hours for this body; the tick now takes well under seconds."""
    policy = EvolutionPolicyFactory(tenant=tenant, model=MODEL, agent_name=AGENT, window_seconds=600)
    now = timezone.now()
    _failing_call(tenant, at=now - timedelta(seconds=120), result="Error: " + '"\\' * 1_000_000, number=1)
    _failing_call(
        tenant, at=now - timedelta(seconds=60), result=json.dumps({"error": "'" * 2_000_000}), number=2
    )

    started = time.monotonic()
    assert tasks.tick_policy.apply(args=[tenant.pk, policy.pk]).get()
    assert time.monotonic() - started < 15

    signatures = sorted(ToolFailureCluster.objects.filter(policy=policy).values_list("signature", flat=True))
    assert len(signatures) == 2
    assert all(len(signature) <= 200 for signature in signatures)
    assert signatures[0].startswith("'<s>'")  # the quotes of the JSON error pair up
    assert signatures[1].startswith('Error: "\\"')  # an unclosed quote stays as written
