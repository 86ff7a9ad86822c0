"""How a trajectory's rewards reach training: the whole trajectory's number, the trajectory-level ones, each
step's own; session-endpoint rewards replaced by a later value left out; an override of the whole trajectory
beating every step's own. Tenancy: another tenant's rewards on a trajectory of the same session name never
count."""

import pytest

from apps.rewards.models import RewardSource, RewardTarget
from apps.rewards.selectors import training_rewards
from apps.rewards.services import reward_set_for_interaction
from apps.trajectories.models import Trajectory
from tests.rewards.factories import RewardFactory
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def _steps(trajectory: Trajectory) -> list[str]:
    return [str(step_id) for step_id in trajectory.steps.order_by("index").values_list("id", flat=True)]


def test_each_step_keeps_its_own_and_replaced_rewards_stop_counting(tenant, other_tenant):
    trajectory = TrajectoryFactory(tenant=tenant, session_id="s", steps=3)
    first, second, _ = _steps(trajectory)
    theirs = TrajectoryFactory(tenant=other_tenant, session_id="s", steps=1)
    RewardFactory(trajectory=theirs, value=-5.0, source=RewardSource.AGENT)
    for value in (0.1, 0.4):  # the agent changes its mind: 0.4 replaces 0.1
        reward_set_for_interaction(
            tenant_id=tenant.pk,
            trajectory_id=trajectory.pk,
            step_id=first,
            value=value,
            timing="immediate",
            created_by="ak_test",
        )
    reward_set_for_interaction(
        tenant_id=tenant.pk,
        trajectory_id=trajectory.pk,
        step_id=second,
        value=1.0,
        timing="terminal",
        created_by="ak_test",
    )
    rewards = training_rewards(tenant=tenant, trajectory=trajectory)
    assert rewards.steps == {first: 0.4, second: 1.0}
    assert rewards.trajectory == pytest.approx(0.7)  # the agent's current rewards, averaged
    assert rewards.outcome is None
    assert trajectory.rewards.count() == 3  # the replaced one is kept as history


def test_an_override_of_the_whole_trajectory_beats_every_steps_own(tenant):
    trajectory = TrajectoryFactory(tenant=tenant, steps=2)
    first, _ = _steps(trajectory)
    RewardFactory(
        trajectory=trajectory, target=RewardTarget.STEP, step_id=first, value=0.2, source=RewardSource.AGENT
    )
    RewardFactory(trajectory=trajectory, value=0.9, source=RewardSource.EVALUATOR)
    rewards = training_rewards(tenant=tenant, trajectory=trajectory)
    assert (rewards.steps, rewards.outcome, rewards.trajectory) == ({first: 0.2}, 0.9, 0.9)
    RewardFactory(trajectory=trajectory, value=0.0, source=RewardSource.ANNOTATOR, is_override=True)
    rewards = training_rewards(tenant=tenant, trajectory=trajectory)
    assert (rewards.steps, rewards.outcome, rewards.trajectory) == ({}, 0.0, 0.0)
