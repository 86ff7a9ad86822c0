"""A reward addressed by session id goes to the session's newest trajectory: after its trajectory ended and
late steps went on in continuations (`~2`, `~3`), the newest continuation; a reward naming a step stays with
that step's trajectory. Another tenant's session of the same name is never reached."""

import pytest

from apps.rewards.models import Reward
from apps.rewards.selectors import reward_session_target
from apps.rewards.services import reward_append_for_agent
from apps.trajectories.models import Trajectory
from apps.trajectories.services import steps_ingest, trajectory_end
from tests.trajectories.builders import gateway_step, ingested

pytestmark = pytest.mark.django_db


def _reward(tenant, *, session_id=None, step_id=None, value=1.0) -> dict:
    return reward_append_for_agent(
        tenant_id=tenant.pk,
        session_id=session_id,
        step_id=step_id,
        value=value,
        kind="numeric",
        source="user",
        label="",
        idempotency_key=None,
        timing="delayed",
        created_by="test",
    )


def test_a_session_reward_follows_the_chain_of_continuations(tenant, other_tenant):
    first = ingested(tenant, "chain", [gateway_step(tenant, "chain")])
    theirs = ingested(other_tenant, "chain", [gateway_step(other_tenant, "chain")])
    unrelated = ingested(tenant, "chain~2", [gateway_step(tenant, "chain~2")])  # a session of its own
    assert reward_session_target(tenant_id=tenant.pk, session_id="chain").trajectory_ids == (first.pk,)

    trajectory_end(tenant=tenant, trajectory_id=first.pk)
    early_step = gateway_step(tenant, "chain")
    steps_ingest(records=[early_step])
    second = Trajectory.objects.get(tenant=tenant, continues=first)
    trajectory_end(tenant=tenant, trajectory_id=second.pk)
    steps_ingest(records=[gateway_step(tenant, "chain")])
    third = Trajectory.objects.get(tenant=tenant, continues=second)
    assert (second.session_id, third.session_id) == ("chain~3", "chain~4")  # ~2 was taken

    target = reward_session_target(tenant_id=tenant.pk, session_id="chain")
    assert (target.trajectory_id, target.is_open) == (third.pk, True)
    assert target.trajectory_ids == (first.pk, second.pk, third.pk)
    assert reward_session_target(tenant_id=tenant.pk, session_id="chain~3").trajectory_id == third.pk
    assert reward_session_target(tenant_id=tenant.pk, session_id="chain~2").trajectory_ids == (unrelated.pk,)
    assert reward_session_target(tenant_id=other_tenant.pk, session_id="chain").trajectory_ids == (theirs.pk,)
    assert reward_session_target(tenant_id=tenant.pk, session_id="nobody") is None

    assert _reward(tenant, session_id="chain")["trajectory_id"] == str(third.pk)
    assert _reward(tenant, step_id=early_step["step_id"])["trajectory_id"] == str(second.pk)
    assert _reward(other_tenant, session_id="chain")["trajectory_id"] == str(theirs.pk)
    assert set(Reward.objects.filter(tenant=tenant).values_list("trajectory_id", flat=True)) == {
        third.pk,
        second.pk,
    }


def test_a_session_whose_newest_trajectory_ended_is_rewarded_there(tenant):
    """No late step came: the ended trajectory is the newest and takes the reward (within the window)."""
    ended = ingested(tenant, "done", [gateway_step(tenant, "done")])
    trajectory_end(tenant=tenant, trajectory_id=ended.pk)
    target = reward_session_target(tenant_id=tenant.pk, session_id="done")
    assert (target.trajectory_id, target.is_open) == (ended.pk, False)
    assert _reward(tenant, session_id="done")["trajectory_id"] == str(ended.pk)
