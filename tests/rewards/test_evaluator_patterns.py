"""A tenant's regex evaluator runs as tenant PII patterns do (checked, then matched on the `regex` engine with
a timeout): a pattern that backtracks on an answer is stopped with a clear reason and stores no reward; the
trajectory's other evaluators still run; the evaluator task has time limits."""

import time

import pytest

from apps.rewards.models import Evaluator, Reward
from apps.rewards.services import evaluator_create
from apps.rewards.tasks import run_evaluators
from apps.trajectories.models import Step
from areal_web.celery import app
from tests.rewards.factories import SYSTEM, EvaluatorFactory
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db
HOSTILE_ANSWER = "a" * 64 + "!"  # `re` tries 2^64 ways to split the a's before it gives up


def _answering(tenant, text):
    trajectory = TrajectoryFactory(tenant=tenant, steps=2)
    Step.objects.filter(trajectory=trajectory, index=1).update(action={"text": text})
    return trajectory


def _run(trajectory) -> tuple[dict, float]:
    started = time.monotonic()
    result = run_evaluators.apply(args=[str(trajectory.pk)]).get()
    return result["results"], time.monotonic() - started


def test_a_backtracking_pattern_is_stopped_with_the_reason_and_the_others_still_run(tenant):
    evaluator_create(tenant=tenant, actor=SYSTEM, name="slow", kind="regex", config={"pattern": "(a|aa)+$"})
    evaluator_create(tenant=tenant, actor=SYSTEM, name="ends", kind="regex", config={"pattern": "!$"})
    trajectory = _answering(tenant, HOSTILE_ANSWER)

    results, seconds = _run(trajectory)

    assert seconds < 15
    assert results["slow@1"].startswith(
        "skipped: the pattern ran longer than 1 s on this answer and was stopped"
    )
    assert results["ends@1"] == 1.0
    assert list(Reward.objects.filter(trajectory=trajectory).values_list("created_by", flat=True)) == [
        "ends@1"
    ]


def test_nested_repetition_that_hangs_re_gets_a_verdict(tenant):
    evaluator_create(tenant=tenant, actor=SYSTEM, name="nested", kind="regex", config={"pattern": "(a+)+$"})
    trajectory = _answering(tenant, HOSTILE_ANSWER)

    results, seconds = _run(trajectory)

    assert seconds < 15
    assert results == {"nested@1": 0.0}
    assert Reward.objects.get(trajectory=trajectory).label == "no match"


def test_a_pattern_too_large_to_compile_is_refused_when_saved_and_nothing_is_created(tenant, api_client):
    operator = api_client(scopes=["admin"])
    for pattern in ("(?:a{1000}){1000}", "("):
        refused = operator.post(
            "/api/v1/evaluators/",
            {"name": "huge", "kind": "regex", "config": {"pattern": pattern}},
            format="json",
        )
        assert refused.status_code == 400, refused.content
        assert "pattern" in refused.json()["error"]["message"]
    assert not Evaluator.objects.filter(tenant=tenant).exists()


def test_a_pattern_stored_before_the_check_is_refused_when_run(tenant):
    EvaluatorFactory(tenant=tenant, name="huge", kind="regex", config={"pattern": "(?:a{1000}){1000}"})
    results, _ = _run(_answering(tenant, "a"))
    assert results["huge@1"].startswith("skipped: bad pattern: its repetitions are too large")


def test_the_evaluator_tasks_have_time_limits():
    for name in ("rewards.run_evaluators", "rewards.run_judge"):
        task = app.tasks[name]
        assert 0 < task.soft_time_limit < task.time_limit
