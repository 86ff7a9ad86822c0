"""Trajectories with real steps (packed token arrays) and reward specs, for the reward, qualification and
annotation tests."""

from apps.audit.services import Actor
from apps.rewards.models import Reward
from apps.rewards.services import reward_spec_create
from apps.trajectories.models import Trajectory
from tests.trajectories.factories import TrajectoryFactory

SYSTEM = Actor.system("test")


def make_trajectory(tenant, **fields) -> Trajectory:
    """TrajectoryFactory under its old name, for the gateway and reliability tests that still call it."""
    return TrajectoryFactory(tenant=tenant, **fields)


def make_spec(tenant, **fields):
    defaults = {
        "name": "quality",
        "kind": "numeric",
        "minimum": 0.0,
        "maximum": 1.0,
        "is_training_reward": True,
    }
    return reward_spec_create(tenant=tenant, actor=SYSTEM, **{**defaults, **fields})


def make_reward(trajectory, *, source: str, value: float, **fields) -> Reward:
    """A trajectory reward from any source, as its own path (evaluator worker, annotator, gateway) would
    have stored it: for tests of what rewards mean once stored, not of who may post them."""
    return Reward.objects.create(
        tenant_id=trajectory.tenant_id,
        trajectory=trajectory,
        target="trajectory",
        value=value,
        source=source,
        created_by=f"test-{source}",
        **fields,
    )
