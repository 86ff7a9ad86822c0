"""Evaluators on a (in-process) worker: results land as evaluator rewards naming the evaluator and version,
once per version, when a trajectory ends and on demand."""

import pytest

from apps.audit.models import AuditEvent
from apps.core.errors import NotFound
from apps.qualification.models import Qualification
from apps.rewards.models import Evaluator, Reward
from apps.rewards.services import evaluator_create, evaluator_run_enqueue
from apps.rewards.tasks import run_evaluators
from apps.tenants.permissions import Role
from apps.trajectories.models import Step
from apps.trajectories.services import trajectory_end
from tests.qualification.conftest import eager_tasks  # noqa: F401  (fixture)
from tests.rewards.factories import SYSTEM
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def _answering(tenant, text, **fields):
    trajectory = TrajectoryFactory(tenant=tenant, steps=2, **fields)
    Step.objects.filter(trajectory=trajectory, index=1).update(
        action={"text": text},
        observation={
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "tool", "tool_call_id": "call-1", "content": '{"temp": 21}'},
            ]
        },
    )
    return trajectory


def test_evaluators_run_when_a_trajectory_ends(
    tenant,
    other_tenant,
    eager_tasks,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    evaluator_create(
        tenant=tenant,
        actor=SYSTEM,
        name="exact",
        version="1",
        kind="exact_match",
        config={"expected": "It is 21 degrees."},
    )
    evaluator_create(
        tenant=tenant, actor=SYSTEM, name="tools", version="2", kind="tool_call_succeeded", config={}
    )
    evaluator_create(tenant=other_tenant, actor=SYSTEM, name="theirs", kind="regex", config={"pattern": "."})
    trajectory = _answering(tenant, "it is 21  degrees.", status="open")
    with django_capture_on_commit_callbacks(execute=True):
        trajectory_end(tenant=tenant, trajectory_id=trajectory.pk)
    rewards = {reward.created_by: reward for reward in Reward.objects.filter(trajectory=trajectory)}
    assert set(rewards) == {"exact@1", "tools@2"}
    assert all(
        reward.source == "evaluator" and reward.timing == "terminal" and reward.target == "trajectory"
        for reward in rewards.values()
    )
    assert (rewards["exact@1"].value, rewards["tools@2"].value) == (1.0, 1.0)
    assert Qualification.objects.get(trajectory=trajectory).training_reward == 1.0
    again = run_evaluators.apply(args=[str(trajectory.pk)]).get()
    assert again["results"] == {"exact@1": 1.0, "tools@2": 1.0}
    assert Reward.objects.filter(trajectory=trajectory).count() == 2  # idempotent per version


def test_a_failing_evaluator_is_skipped_and_others_still_run(tenant):
    evaluator_create(tenant=tenant, actor=SYSTEM, name="needs-answer", kind="exact_match", config={})
    evaluator_create(
        tenant=tenant, actor=SYSTEM, name="json", kind="json_schema", config={"schema": {"type": "object"}}
    )
    trajectory = _answering(tenant, "not json")
    result = run_evaluators.apply(args=[str(trajectory.pk)]).get()
    assert result["results"]["needs-answer@1"].startswith("skipped")
    assert list(Reward.objects.filter(trajectory=trajectory).values_list("created_by", "value")) == [
        ("json@1", 0.0)
    ]


def test_evaluator_api(
    api_client, member, tenant, other_tenant, django_capture_on_commit_callbacks, eager_tasks
):  # noqa: F811
    theirs = evaluator_create(
        tenant=other_tenant, actor=SYSTEM, name="theirs", kind="regex", config={"pattern": "."}
    )
    their_trajectory = TrajectoryFactory(tenant=other_tenant)
    operator = api_client(user=member(Role.OPERATOR))
    created = operator.post(
        "/api/v1/evaluators/",
        {"name": "has-number", "kind": "regex", "config": {"pattern": r"\d+"}},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert AuditEvent.objects.filter(tenant=tenant, verb="evaluator.create").count() == 1
    denied = api_client(user=member(Role.ANNOTATOR)).post(
        "/api/v1/evaluators/", {"name": "x", "kind": "regex"}, format="json"
    )
    assert denied.status_code == 403
    assert Evaluator.objects.filter(tenant=tenant).count() == 1
    listed = operator.get("/api/v1/evaluators/").json()["results"]
    assert [row["name"] for row in listed] == ["has-number"]
    trajectory = _answering(tenant, "answer 42")
    with django_capture_on_commit_callbacks(execute=True):
        run = operator.post(
            f"/api/v1/evaluators/{created.json()['id']}/run/",
            {"trajectory_id": str(trajectory.pk)},
            format="json",
        )
    assert run.status_code == 202
    assert list(Reward.objects.filter(trajectory=trajectory).values_list("created_by", "value")) == [
        ("has-number@1", 1.0)
    ]
    assert (
        operator.post(
            f"/api/v1/evaluators/{theirs.pk}/run/", {"trajectory_id": str(trajectory.pk)}, format="json"
        ).status_code
        == 404
    )
    assert (
        operator.post(
            f"/api/v1/evaluators/{created.json()['id']}/run/",
            {"trajectory_id": str(their_trajectory.pk)},
            format="json",
        ).status_code
        == 404
    )
    assert not Reward.objects.filter(tenant=other_tenant).exists()


def test_running_an_evaluator_is_enqueued_on_commit_within_the_tenant(
    tenant, other_tenant, django_capture_on_commit_callbacks, monkeypatch
):
    evaluator = evaluator_create(
        tenant=tenant, actor=SYSTEM, name="digits", kind="regex", config={"pattern": "."}
    )
    trajectory = _answering(tenant, "answer 42")
    theirs = TrajectoryFactory(tenant=other_tenant)
    sent = []
    monkeypatch.setattr(run_evaluators, "delay", lambda *args: sent.append(args))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        evaluator_run_enqueue(tenant=tenant, evaluator=evaluator, trajectory=trajectory)
        assert sent == []  # nothing is sent before the commit
    assert len(callbacks) == 1
    assert sent == [(str(trajectory.pk), evaluator.pk)]
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(NotFound):
        evaluator_run_enqueue(tenant=tenant, evaluator=evaluator, trajectory=theirs)
    assert callbacks == []
    assert len(sent) == 1
