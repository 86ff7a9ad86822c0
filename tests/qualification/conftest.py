import pytest

from apps.rewards.services import reward_append_for_agent
from tests.rewards.factories import make_spec
from tests.trajectories.factories import TrajectoryFactory


@pytest.fixture
def eager_tasks():
    """Celery runs tasks in-process when they are sent: the enqueued task itself runs, synchronously."""
    from areal_web.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


@pytest.fixture
def good_trajectory(tenant):
    """good_trajectory(**fields) → a trajectory that passes every gate unless `fields` break one."""
    make_spec(tenant)

    def make(*, reward=0.8, text=None, **fields):
        import uuid

        trajectory = TrajectoryFactory(tenant=tenant, text=text or uuid.uuid4().hex, **fields)
        if reward is not None:
            reward_append_for_agent(
                tenant_id=tenant.pk,
                session_id=trajectory.session_id,
                step_id=None,
                value=reward,
                kind=None,
                source="user",
                label="",
                idempotency_key=None,
                timing="delayed",
                created_by="test",
            )
        return trajectory

    return make
