"""Reward specs and rewards over the REST API: checks against the spec, overrides, the training reward,
end-user feedback counts, and a second tenant's rows never showing."""

import pytest

from apps.audit.models import AuditEvent
from apps.rewards.models import Reward, RewardSpec
from apps.rewards.services import reward_append_for_agent
from apps.tenants.permissions import Role
from tests.rewards.factories import RewardFactory, make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def planted(other_tenant):
    spec = make_spec(other_tenant, name="theirs")
    trajectory = TrajectoryFactory(tenant=other_tenant, session_id="their-session")
    reward_append_for_agent(
        tenant_id=other_tenant.pk,
        session_id="their-session",
        step_id=None,
        value=0.4,
        kind=None,
        source="user",
        label="",
        idempotency_key="theirs",
        timing="delayed",
        created_by="x",
    )
    return {"spec": spec, "trajectory": trajectory, "reward": Reward.objects.get(tenant=other_tenant)}


def test_spec_create_list_detail_and_isolation(api_client, admin_user, tenant, planted):
    client = api_client(user=admin_user)
    created = client.post(
        "/api/v1/reward-specs/",
        {
            "name": "verdict",
            "kind": "categorical",
            "categories": {"good": 1, "bad": 0},
            "is_training_reward": True,
            "combination": "priority",
            "source_priority": ["annotator", "user", "evaluator"],
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    listed = client.get("/api/v1/reward-specs/").json()["results"]
    assert [row["name"] for row in listed] == ["verdict"]
    assert client.get(f"/api/v1/reward-specs/{created.json()['id']}/").json()["categories"] == {
        "good": 1.0,
        "bad": 0.0,
    }
    assert client.get(f"/api/v1/reward-specs/{planted['spec'].pk}/").status_code == 404
    assert AuditEvent.objects.filter(tenant=tenant, verb="reward_spec.create").count() == 1
    again = client.post(
        "/api/v1/reward-specs/",
        {"name": "other", "kind": "numeric", "is_training_reward": True},
        format="json",
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "training_reward_exists"
    bad = client.post(
        "/api/v1/reward-specs/", {"name": "b", "kind": "numeric", "minimum": 2, "maximum": 1}, format="json"
    )
    assert bad.status_code == 400
    assert "maximum" in bad.json()["error"]["fields"]
    assert RewardSpec.objects.filter(tenant=tenant).count() == 1


def test_reward_create_checks_the_spec_and_lists_with_filters(api_client, member, tenant, planted):
    make_spec(tenant, name="quality", minimum=0, maximum=1)
    trajectory = TrajectoryFactory(tenant=tenant)
    annotator = member(Role.ANNOTATOR)
    client = api_client(user=annotator)
    out = client.post("/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 1.5}, format="json")
    assert out.status_code == 422
    assert out.json()["error"]["code"] == "reward_out_of_spec"
    assert "'quality'" in out.json()["error"]["message"]
    unknown = client.post(
        "/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 1, "spec": "nope"}, format="json"
    )
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "reward_spec_unknown"
    ok = client.post("/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 0.8}, format="json")
    assert ok.status_code == 201, ok.content
    body = ok.json()
    assert (body["source"], body["spec"], body["target"], body["created_by"]) == (
        "annotator",
        "quality",
        "trajectory",
        annotator.username,
    )
    step = trajectory.steps.first()
    on_step = client.post(
        "/api/v1/rewards/",
        {"trajectory_id": str(trajectory.pk), "step_id": str(step.pk), "value": 0.1},
        format="json",
    )
    assert on_step.status_code == 201
    assert on_step.json()["target"] == "step"
    rows = client.get(f"/api/v1/rewards/?trajectory_id={trajectory.pk}").json()["results"]
    assert [row["value"] for row in rows] == [0.1, 0.8]
    assert [row["value"] for row in client.get(f"/api/v1/rewards/?step_id={step.pk}").json()["results"]] == [
        0.1
    ]
    everything = client.get("/api/v1/rewards/?page_size=200").json()["results"]
    assert str(planted["reward"].pk) not in {row["reward_id"] for row in everything}
    assert len(everything) == 2
    assert client.get(f"/api/v1/rewards/{planted['reward'].pk}/").status_code == 404
    assert client.get(f"/api/v1/rewards/{body['reward_id']}/").json()["value"] == 0.8
    foreign = client.post(
        "/api/v1/rewards/", {"trajectory_id": str(planted["trajectory"].pk), "value": 0.5}, format="json"
    )
    assert foreign.status_code == 404
    assert Reward.objects.filter(tenant=tenant).count() == 2
    assert Reward.objects.filter(tenant=planted["trajectory"].tenant).count() == 1


def test_idempotency_key_stores_one_reward(api_client, tenant):
    trajectory = TrajectoryFactory(tenant=tenant)
    client = api_client(["rewards:write", "trajectories:read"])
    body = {"trajectory_id": str(trajectory.pk), "value": 0.3, "source": "rule", "idempotency_key": "k1"}
    first, again = (
        client.post("/api/v1/rewards/", body, format="json"),
        client.post("/api/v1/rewards/", body, format="json"),
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["reward_id"] == again.json()["reward_id"]
    assert first.json()["source"] == "rule"
    assert Reward.objects.filter(tenant=tenant).count() == 1
    assert AuditEvent.objects.filter(tenant=tenant, verb="reward.create").count() == 1


def test_override_is_a_new_audited_reward_that_wins(api_client, member, tenant):
    spec = make_spec(tenant)
    trajectory = TrajectoryFactory(tenant=tenant)
    for source, value in [("evaluator", 0.2), ("user", 0.9)]:
        RewardFactory(trajectory=trajectory, source=source, value=value, spec=spec)
    summary = api_client(user=member(Role.VIEWER)).get(f"/api/v1/rewards/trajectories/{trajectory.pk}/")
    assert summary.json()["training_reward"] == 0.9  # user beats evaluator by the default priority
    annotator = api_client(user=member(Role.ANNOTATOR))
    denied = annotator.post(
        "/api/v1/rewards/",
        {"trajectory_id": str(trajectory.pk), "value": 0.0, "override": True, "reason": "wrong"},
        format="json",
    )
    assert denied.status_code == 403
    assert Reward.objects.filter(tenant=tenant).count() == 2
    operator = api_client(user=member(Role.OPERATOR))
    no_reason = operator.post(
        "/api/v1/rewards/",
        {"trajectory_id": str(trajectory.pk), "value": 0.0, "override": True},
        format="json",
    )
    assert no_reason.status_code == 400
    override = operator.post(
        "/api/v1/rewards/",
        {
            "trajectory_id": str(trajectory.pk),
            "value": 0.0,
            "override": True,
            "reason": "the answer was wrong",
        },
        format="json",
    )
    assert override.status_code == 201
    assert override.json()["is_override"] is True
    assert operator.get(f"/api/v1/rewards/trajectories/{trajectory.pk}/").json()["training_reward"] == 0.0
    event = AuditEvent.objects.get(tenant=tenant, verb="reward.override")
    assert event.data["reason"] == "the answer was wrong"
    assert event.target_id == override.json()["reward_id"]
    assert Reward.objects.filter(tenant=tenant).count() == 3  # appended, nothing edited
    assert set(Reward.objects.filter(tenant=tenant).values_list("value", flat=True)) == {0.2, 0.9, 0.0}


def test_weighted_sum_training_reward(api_client, tenant):
    spec = make_spec(tenant, combination="weighted_sum", source_weights={"evaluator": 0.5, "user": 0.5})
    trajectory = TrajectoryFactory(tenant=tenant)
    for source, value in [("evaluator", 1.0), ("user", 0.0), ("agent", 1.0)]:
        RewardFactory(trajectory=trajectory, source=source, value=value, spec=spec)
    summary = api_client(["trajectories:read"]).get(f"/api/v1/rewards/trajectories/{trajectory.pk}/").json()
    assert summary["training_reward"] == 0.5


def test_agent_spec_beats_tenant_wide_spec(tenant):
    make_spec(tenant, name="quality", maximum=1.0)
    make_spec(tenant, name="quality", agent_name="coder", maximum=10.0)
    coder = TrajectoryFactory(tenant=tenant, agent_name="coder")
    helper = TrajectoryFactory(tenant=tenant, agent_name="helper")
    ok = reward_append_for_agent(
        tenant_id=tenant.pk,
        session_id=coder.session_id,
        step_id=None,
        value=7,
        kind=None,
        source="agent",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="t",
    )
    assert ok["value"] == 7
    assert ok["spec"] == "quality"
    from apps.rewards.errors import RewardRejected

    with pytest.raises(RewardRejected):
        reward_append_for_agent(
            tenant_id=tenant.pk,
            session_id=helper.session_id,
            step_id=None,
            value=7,
            kind=None,
            source="agent",
            label="",
            idempotency_key=None,
            timing="delayed",
            created_by="t",
        )
