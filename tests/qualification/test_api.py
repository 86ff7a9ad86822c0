"""Reviews, verdicts, overrides and the training queue over the REST API; enqueues on trajectory end,
reward and review; a second tenant's rows never show."""

import pytest

from apps.audit.models import AuditEvent
from apps.qualification.models import Qualification, Review
from apps.qualification.services import qualification_evaluate
from apps.rewards.services import reward_append_for_agent
from apps.tenants.permissions import Role
from apps.trajectories.services import trajectory_end, trajectory_open
from tests.rewards.factories import make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def planted(other_tenant):
    make_spec(other_tenant)
    trajectory = TrajectoryFactory(tenant=other_tenant, agent_name="theirs", purpose="eval")
    reward_append_for_agent(
        tenant_id=other_tenant.pk,
        session_id=trajectory.session_id,
        step_id=None,
        value=1,
        kind=None,
        source="user",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="t",
    )
    qualification_evaluate(trajectory_id=trajectory.pk)
    good = TrajectoryFactory(tenant=other_tenant, agent_name="theirs", text="their good one")
    reward_append_for_agent(
        tenant_id=other_tenant.pk,
        session_id=good.session_id,
        step_id=None,
        value=1,
        kind=None,
        source="user",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="t",
    )
    qualification_evaluate(trajectory_id=good.pk)
    return trajectory


def test_training_queue_and_disqualified_counts(api_client, member, good_trajectory, planted):
    good_trajectory(agent_name="helper", task_id="t1", group_id="t1#0")
    good_trajectory(agent_name="helper", task_id="t1", group_id="t1#0")
    good_trajectory(agent_name="coder", task_id="t2", group_id="")
    good_trajectory(purpose="eval")
    good_trajectory(purpose="replay", reward=None)
    from apps.trajectories.models import Trajectory

    for trajectory in Trajectory.objects.filter(tenant__slug="acme"):
        qualification_evaluate(trajectory_id=trajectory.pk)
    client = api_client(user=member(Role.VIEWER))
    queue = client.get("/api/v1/training-queue/").json()
    assert queue["waiting"] == [
        {"agent": "helper", "task_id": "t1", "group_id": "t1#0", "count": 2},
        {"agent": "coder", "task_id": "t2", "group_id": "", "count": 1},
    ]
    assert queue["disqualified"] == [
        {"code": "purpose_production", "count": 2},
        {"code": "has_training_reward", "count": 1},
    ]
    listed = client.get("/api/v1/qualification/?reason=has_training_reward").json()["results"]
    assert len(listed) == 1
    assert listed[0]["reasons"] == ["has_training_reward", "purpose_production"]
    everything = client.get("/api/v1/qualification/?page_size=200").json()["results"]
    assert len(everything) == 5
    assert str(planted.pk) not in {row["trajectory_id"] for row in everything}
    assert client.get(f"/api/v1/qualification/{planted.pk}/").status_code == 404


def test_review_and_override_are_audited_and_guarded(
    api_client, member, tenant, good_trajectory, planted, eager_tasks, django_capture_on_commit_callbacks
):
    trajectory = good_trajectory()
    operator = api_client(user=member(Role.OPERATOR))
    annotator = api_client(user=member(Role.ANNOTATOR))
    denied = annotator.post(
        "/api/v1/reviews/", {"trajectory_id": str(trajectory.pk), "status": "approved"}, format="json"
    )
    assert denied.status_code == 403
    assert not Review.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        rejected = operator.post(
            "/api/v1/reviews/",
            {"trajectory_id": str(trajectory.pk), "status": "rejected", "note": "leaks a customer name"},
            format="json",
        )
    assert rejected.status_code == 201
    verdict = operator.get(f"/api/v1/qualification/{trajectory.pk}/").json()
    assert (verdict["status"], verdict["reasons"], verdict["review"]["status"]) == (
        "disqualified",
        ["reviewed_if_required"],
        "rejected",
    )
    assert AuditEvent.objects.filter(tenant=tenant, verb="trajectory.review").count() == 1
    assert (
        operator.post(
            "/api/v1/reviews/", {"trajectory_id": str(planted.pk), "status": "approved"}, format="json"
        ).status_code
        == 404
    )
    before = Qualification.objects.get(trajectory=trajectory).status
    no = annotator.post(
        f"/api/v1/qualification/{trajectory.pk}/override/",
        {"status": "qualified", "reason": "x"},
        format="json",
    )
    assert no.status_code == 403
    assert Qualification.objects.get(trajectory=trajectory).status == before
    overridden = operator.post(
        f"/api/v1/qualification/{trajectory.pk}/override/",
        {"status": "qualified", "reason": "reviewed again with legal"},
        format="json",
    )
    assert overridden.status_code == 200
    body = overridden.json()
    assert (body["status"], body["gate_status"], body["gate_reasons"]) == (
        "qualified",
        "disqualified",
        ["reviewed_if_required"],
    )
    assert AuditEvent.objects.get(tenant=tenant, verb="qualification.override").data["reason"] == (
        "reviewed again with legal"
    )
    assert (
        operator.post(
            f"/api/v1/qualification/{planted.pk}/override/",
            {"status": "qualified", "reason": "x"},
            format="json",
        ).status_code
        == 404
    )


def test_gates_run_when_a_trajectory_ends_gets_a_reward_or_on_demand(
    api_client, member, tenant, eager_tasks, django_capture_on_commit_callbacks
):
    make_spec(tenant)
    with django_capture_on_commit_callbacks(execute=True):
        trajectory = trajectory_open(tenant=tenant, session_id="live")
    assert not Qualification.objects.filter(trajectory=trajectory).exists()  # open: nothing to judge yet
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        trajectory_end(tenant=tenant, trajectory_id=trajectory.pk)
    assert len(callbacks) == 1
    assert Qualification.objects.get(trajectory=trajectory).reasons == [
        "has_training_reward",
        "token_data_complete",
        "within_length_limits",
    ]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        reward_append_for_agent(
            tenant_id=tenant.pk,
            session_id="live",
            step_id=None,
            value=1,
            kind=None,
            source="user",
            label="",
            idempotency_key=None,
            timing="delayed",
            created_by="t",
        )
    assert len(callbacks) == 1
    assert Qualification.objects.get(trajectory=trajectory).training_reward == 1.0
    Qualification.objects.filter(trajectory=trajectory).delete()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client(user=member(Role.OPERATOR)).post(f"/api/v1/qualification/{trajectory.pk}/run/")
    assert response.status_code == 202
    assert Qualification.objects.get(trajectory=trajectory).status == "disqualified"
    with django_capture_on_commit_callbacks(execute=True):
        viewer = api_client(user=member(Role.VIEWER)).post(f"/api/v1/qualification/{trajectory.pk}/run/")
    assert viewer.status_code == 403


def test_limits(api_client, member, tenant):
    admin = api_client(user=member(Role.ADMIN))
    assert admin.get("/api/v1/qualification/limits/").json()["max_steps"] == 256
    changed = admin.put(
        "/api/v1/qualification/limits/", {"min_steps": 1, "max_steps": 10, "max_tokens": 500}, format="json"
    )
    assert changed.status_code == 200
    assert changed.json()["max_steps"] == 10
    assert (
        api_client(user=member(Role.ANNOTATOR))
        .put(
            "/api/v1/qualification/limits/", {"min_steps": 1, "max_steps": 99, "max_tokens": 5}, format="json"
        )
        .status_code
        == 403
    )
    assert admin.get("/api/v1/qualification/limits/").json()["max_steps"] == 10
