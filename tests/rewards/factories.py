"""Rewards and evaluators written straight to their tables, and reward specs through their service (a spec is
validated there: the training-reward rule, ranges, categories)."""

import factory

from apps.audit.services import Actor
from apps.rewards.models import Evaluator, EvaluatorKind, Reward, RewardSource, RewardTarget
from apps.rewards.services import reward_spec_create
from apps.trajectories.models import Trajectory
from tests.tenants.factories import TenantFactory
from tests.trajectories.factories import TrajectoryFactory

SYSTEM = Actor.system("test")


class RewardFactory(factory.django.DjangoModelFactory):
    """A trajectory reward from any source, as its own path (evaluator worker, annotator, gateway) would have
    stored it: for tests of what rewards mean once stored, not of who may post them."""

    class Meta:
        model = Reward

    trajectory = factory.SubFactory(TrajectoryFactory)
    tenant = factory.SelfAttribute("trajectory.tenant")
    target = RewardTarget.TRAJECTORY
    value = 1.0
    source = RewardSource.USER
    created_by = factory.LazyAttribute(lambda reward: f"test-{reward.source}")


class EvaluatorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Evaluator

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda number: f"evaluator-{number}")
    kind = EvaluatorKind.EXACT_MATCH
    config = factory.Dict({"expected": "x"})


def make_spec(tenant, **fields):
    defaults = {
        "name": "quality",
        "kind": "numeric",
        "minimum": 0.0,
        "maximum": 1.0,
        "is_training_reward": True,
    }
    return reward_spec_create(tenant=tenant, actor=SYSTEM, **{**defaults, **fields})


def make_trajectory(tenant, **fields) -> Trajectory:
    """TrajectoryFactory under its old name, for the gateway and reliability tests that still call it."""
    return TrajectoryFactory(tenant=tenant, **fields)
