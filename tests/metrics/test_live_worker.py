"""A point published on a real Celery worker process reaches a page's WebSocket in under a second (the
channel layer of the run: Redis on CI, the embedded relay layer otherwise)."""

import json
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from apps.metrics.tasks import overview_tick
from apps.tenants.permissions import Role
from tests.metrics.test_dashboard import _subscribed
from tests.rewards.factories import RewardFactory
from tests.tenants.factories import MembershipFactory
from tests.trajectories.factories import TrajectoryFactory
from tests.workers_support import celery_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "live-latency.json"


async def test_worker_point_reaches_the_page_in_under_a_second(tenant, tmp_path):
    @sync_to_async
    def setup():
        RewardFactory(trajectory=TrajectoryFactory(tenant=tenant, steps=0), value=1.0, source="environment")
        return MembershipFactory(tenant=tenant, role=Role.VIEWER).user

    socket = await _subscribed(await setup(), "overview.outcomes")
    delays = []
    with celery_worker(log_path=tmp_path / "worker.log") as (worker, queue):
        for _ in range(5):
            overview_tick.apply_async(queue=queue)
            message = await socket.receive_json_from(timeout=90)
            delays.append(time.time() - message["payload"]["sent_at"])
            assert message["payload"]["rewards"] == 1
    await socket.disconnect()
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps({"worker_to_websocket_seconds": delays}))
    print("worker → WebSocket delays (s):", [round(delay, 4) for delay in delays])
    assert max(delays) < 1.0
