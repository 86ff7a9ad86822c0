"""A point published on a real Celery worker process reaches a page's WebSocket in under a second (the
channel layer of the run: Redis on CI, the embedded relay layer otherwise)."""

import json
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.metrics.tasks import overview_tick
from apps.rewards.models import Reward
from apps.tenants.permissions import Role
from tests.metrics.test_dashboard import _subscribed, away_from_a_minute_end
from tests.rewards.factories import RewardFactory
from tests.tenants.factories import MembershipFactory
from tests.trajectories.factories import TrajectoryFactory
from tests.workers_support import celery_worker, worker_ready

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "live-latency.json"


async def test_worker_point_reaches_the_page_in_under_a_second(tenant, tmp_path):
    @sync_to_async
    def setup():
        reward = RewardFactory(
            trajectory=TrajectoryFactory(tenant=tenant, steps=0), value=1.0, source="environment"
        )
        return reward, MembershipFactory(tenant=tenant, role=Role.VIEWER).user

    @sync_to_async
    def rewarded_this_minute(reward):
        """The tick publishes the current minute's rewards only: keep the reward in the minute the tick sees.
        Close to a minute's end, wait for the next one, so that the tick (sent right after, to a worker that is
        already consuming) does not run in a minute the reward is not in."""
        away_from_a_minute_end()
        Reward.objects.filter(pk=reward.pk).update(created_at=timezone.now())

    reward, viewer = await setup()
    socket = await _subscribed(viewer, "overview.outcomes")
    delays = []
    with celery_worker(log_path=tmp_path / "worker.log") as (worker, queue):
        await sync_to_async(worker_ready)(tmp_path / "worker.log")
        for _ in range(5):
            await rewarded_this_minute(reward)
            overview_tick.apply_async(queue=queue)
            message = await socket.receive_json_from(timeout=90)
            delays.append(time.time() - message["payload"]["sent_at"])
            assert message["payload"]["rewards"] == 1
    await socket.disconnect()
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"worker_to_websocket_seconds": delays}))
    print("worker → WebSocket delays (s):", [round(delay, 4) for delay in delays])
    assert max(delays) < 1.0
