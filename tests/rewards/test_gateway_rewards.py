"""The agent-facing reward paths through the real gateway: checks against the reward spec (422 naming it),
end-user thumbs and corrections through /v1/rewards, and /rl/set_reward held to the training spec."""

import uuid

import httpx
import pytest

from apps.audit.services import Actor
from apps.rewards.models import Reward
from apps.rewards.selectors import feedback_summary
from apps.tenants.services import api_key_create
from apps.trajectories.models import Trajectory, trajectory_id_for
from tests.rewards.factories import make_spec
from tests.trajectories.factories import StepFactory, TrajectoryFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _key(tenant, *scopes):
    _, raw = api_key_create(
        tenant=tenant, actor=Actor.system("test"), name=f"k-{uuid.uuid4().hex[:6]}", scopes=list(scopes)
    )
    return {"Authorization": f"Bearer {raw}"}


def test_v1_rewards_are_checked_against_the_spec(gateway_url, tenant, other_tenant):
    make_spec(tenant, name="quality", minimum=0, maximum=1)
    make_spec(
        tenant, name="verdict", kind="categorical", categories={"good": 1, "bad": 0}, is_training_reward=False
    )
    trajectory = TrajectoryFactory(tenant=tenant, session_id="chat-1")
    headers = _key(tenant, "rewards:write")
    out = httpx.post(f"{gateway_url}/v1/rewards", json={"session_id": "chat-1", "value": 3}, headers=headers)
    assert out.status_code == 422
    assert out.json()["error"]["code"] == "reward_out_of_spec"
    assert "'quality'" in out.json()["error"]["message"]
    category = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={"session_id": "chat-1", "spec": "verdict", "label": "great"},
        headers=headers,
    )
    assert category.status_code == 422
    assert "unknown category 'great'" in category.json()["error"]["message"]
    assert "'verdict'" in category.json()["error"]["message"]
    unknown = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={"session_id": "chat-1", "spec": "nope", "value": 1},
        headers=headers,
    )
    assert unknown.status_code == 422
    assert unknown.json()["error"]["code"] == "reward_spec_unknown"
    assert not Reward.objects.filter(tenant=tenant).exists()
    labelled = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={"session_id": "chat-1", "spec": "verdict", "label": "good"},
        headers=headers,
    )
    assert labelled.status_code == 201, labelled.text
    assert (labelled.json()["value"], labelled.json()["kind"], labelled.json()["spec"]) == (
        1.0,
        "categorical",
        "verdict",
    )
    fine = httpx.post(
        f"{gateway_url}/v1/rewards", json={"session_id": "chat-1", "value": 0.75}, headers=headers
    )
    assert fine.status_code == 201
    assert fine.json()["spec"] == "quality"
    foreign = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={"session_id": "chat-1", "value": 0.5},
        headers=_key(other_tenant, "rewards:write"),
    )
    assert foreign.status_code == 404
    assert Reward.objects.filter(trajectory=trajectory).count() == 2


def test_end_user_thumbs_and_corrections(gateway_url, tenant, other_tenant):
    trajectory = TrajectoryFactory(tenant=tenant, session_id="chat-2")
    TrajectoryFactory(tenant=other_tenant, session_id="chat-2")
    step = trajectory.steps.order_by("index").last()
    headers = _key(tenant, "rewards:write")
    up = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={
            "interaction_id": str(step.pk),
            "value": True,
            "kind": "boolean",
            "source": "user",
            "idempotency_key": "thumb-1",
        },
        headers=headers,
    )
    down = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={"session_id": "chat-2", "value": False, "kind": "boolean", "source": "user"},
        headers=headers,
    )
    correction = httpx.post(
        f"{gateway_url}/v1/rewards",
        json={
            "interaction_id": str(step.pk),
            "kind": "critique",
            "source": "user",
            "label": "It should have said the meeting moved to 3 pm.",
        },
        headers=headers,
    )
    assert (up.status_code, down.status_code, correction.status_code) == (201, 201, 201), correction.text
    assert correction.json()["kind"] == "critique"
    assert correction.json()["target"] == "step"
    stored = Reward.objects.get(pk=correction.json()["reward_id"])
    assert stored.label == "It should have said the meeting moved to 3 pm."
    assert stored.source == "user"
    assert feedback_summary(tenant=tenant) == {"thumbs_up": 1, "thumbs_down": 1, "corrections": 1}
    assert feedback_summary(tenant=other_tenant) == {"thumbs_up": 0, "thumbs_down": 0, "corrections": 0}
    empty = httpx.post(
        f"{gateway_url}/v1/rewards", json={"session_id": "chat-2", "kind": "critique"}, headers=headers
    )
    assert empty.status_code == 422


def test_set_reward_is_held_to_the_training_spec(gateway_url, tenant):
    make_spec(tenant, name="success", kind="boolean")
    started = httpx.post(
        f"{gateway_url}/rl/start_session", json={"task_id": "t"}, headers=_key(tenant, "inference")
    ).json()
    trajectory_id = trajectory_id_for(tenant_id=tenant.pk, session_id=started["session_id"])
    step = StepFactory(trajectory=Trajectory.objects.get(pk=trajectory_id), index=0, with_tokens=False)
    auth = {"Authorization": f"Bearer {started['api_key']}"}
    out = httpx.post(
        f"{gateway_url}/rl/set_reward", json={"reward": 0.5, "interaction_id": str(step.pk)}, headers=auth
    )
    assert out.status_code == 422
    assert "'success'" in out.json()["error"]["message"]
    ok = httpx.post(
        f"{gateway_url}/rl/set_reward", json={"reward": 1, "interaction_id": str(step.pk)}, headers=auth
    )
    assert ok.status_code == 200, ok.text
    assert list(Reward.objects.filter(tenant=tenant).values_list("value", "spec__name", "step_id")) == [
        (1.0, "success", step.pk)
    ]
