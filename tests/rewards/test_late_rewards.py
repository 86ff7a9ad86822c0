"""Late rewards bind to ended sessions within the tenant's window; later ones are refused with 410 and
nothing is stored. An operator's override is governance, not feedback, and is not held to the window."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.errors import Gone
from apps.rewards.models import Reward
from apps.rewards.services import reward_append_for_agent, reward_create
from apps.tenants.models import TenantPolicy
from tests.rewards.factories import SYSTEM
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def _ended(tenant, hours_ago):
    trajectory = TrajectoryFactory(tenant=tenant)
    trajectory.ended_at = timezone.now() - timedelta(hours=hours_ago)
    trajectory.save(update_fields=["ended_at"])
    return trajectory


def _agent_reward(tenant, trajectory):
    return reward_append_for_agent(
        tenant_id=tenant.pk,
        session_id=trajectory.session_id,
        step_id=None,
        value=1.0,
        kind="numeric",
        source="user",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="test",
    )


def test_rewards_inside_the_window_bind_to_the_ended_session(tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(late_reward_hours=24)
    trajectory = _ended(tenant, hours_ago=23)
    assert _agent_reward(tenant, trajectory)["created"] is True
    assert Reward.objects.filter(trajectory=trajectory).count() == 1


def test_rewards_after_the_window_are_refused_and_nothing_is_stored(tenant):
    TenantPolicy.objects.filter(tenant=tenant).update(late_reward_hours=24)
    trajectory = _ended(tenant, hours_ago=25)
    with pytest.raises(Gone) as refused:
        _agent_reward(tenant, trajectory)
    assert refused.value.code == "reward_window_closed"
    assert refused.value.status == 410
    with pytest.raises(Gone):
        reward_create(
            tenant=tenant,
            actor=SYSTEM,
            trajectory_id=trajectory.pk,
            value=1.0,
            source="annotator",
            created_by="test",
        )
    assert not Reward.objects.filter(trajectory=trajectory).exists()
    override, created = reward_create(
        tenant=tenant,
        actor=SYSTEM,
        trajectory_id=trajectory.pk,
        value=0.0,
        source="annotator",
        override=True,
        reason="audit found a bad answer",
        created_by="test",
    )
    assert created
    assert override.is_override


def test_the_window_is_a_policy_setting(api_client, tenant):
    client = api_client(["admin"])
    response = client.patch("/api/v1/policy/", {"late_reward_hours": 2}, format="json")
    assert response.status_code == 200
    assert response.json()["late_reward_hours"] == 2
    assert client.patch("/api/v1/policy/", {"late_reward_hours": -1}, format="json").status_code == 400
    trajectory = _ended(tenant, hours_ago=3)
    rewards = api_client(["rewards:write"]).post(
        "/api/v1/rewards/", {"trajectory_id": str(trajectory.pk), "value": 1}, format="json"
    )
    assert rewards.status_code == 410
    assert rewards.json()["error"]["code"] == "reward_window_closed"
