"""Queues take in trajectories that match after they were created: the beat task refills every queue, an
operator can refill one at once through the API, a refill never adds an item twice and stays in its tenant."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.annotation.models import AnnotationItem, AnnotationQueue
from apps.annotation.services import annotation_queue_create
from apps.annotation.tasks import fill_annotation_queues
from apps.tenants.permissions import Role
from tests.rewards.factories import SYSTEM, make_spec
from tests.trajectories.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(tenant):
    spec = make_spec(tenant, name="quality", kind="numeric", minimum=0, maximum=1)
    TrajectoryFactory(tenant=tenant, task_id="support")
    return annotation_queue_create(
        tenant=tenant,
        actor=SYSTEM,
        name="live",
        spec_id=spec.pk,
        filters={"task_id": "support", "status": "complete"},
        annotators_per_item=1,
        assignee_ids=[],
    )


def test_the_beat_task_adds_new_matching_trajectories_once(tenant, other_tenant, queue):
    assert queue.items.count() == 1
    assert queue.filled_at is not None
    new = TrajectoryFactory(tenant=tenant, task_id="support")
    TrajectoryFactory(tenant=tenant, task_id="other")  # does not match
    running = TrajectoryFactory(tenant=tenant, task_id="support", status="open")  # matches once it completes
    TrajectoryFactory(tenant=other_tenant, task_id="support")  # another tenant's

    assert fill_annotation_queues() == 1
    items = set(AnnotationItem.objects.filter(queue=queue).values_list("trajectory_id", flat=True))
    assert new.pk in items
    assert running.pk not in items
    assert len(items) == 2

    running.status = "complete"
    running.save(update_fields=["status"])
    fill_annotation_queues()
    fill_annotation_queues()  # idempotent
    assert AnnotationItem.objects.filter(queue=queue).count() == 3
    assert not AnnotationItem.objects.exclude(tenant=tenant).exists()


def test_a_refill_looks_back_only_an_hour_before_the_last_fill(tenant, queue):
    long_ago = TrajectoryFactory(
        tenant=tenant, task_id="support", started_at=timezone.now() - timedelta(hours=3)
    )
    fill_annotation_queues()
    assert not AnnotationItem.objects.filter(queue=queue, trajectory=long_ago).exists()
    AnnotationQueue.objects.filter(pk=queue.pk).update(filled_at=None)  # a full fill again takes everything
    fill_annotation_queues()
    assert AnnotationItem.objects.filter(queue=queue, trajectory=long_ago).exists()


def test_fill_api_is_for_operators_of_the_tenant(api_client, member, tenant, other_tenant, queue):
    TrajectoryFactory(tenant=tenant, task_id="support")
    annotator = api_client(user=member(Role.ANNOTATOR))
    assert annotator.post(f"/api/v1/annotation/queues/{queue.pk}/fill/").status_code == 403
    outsider = api_client(user=member(Role.OPERATOR, of=other_tenant))
    assert outsider.post(f"/api/v1/annotation/queues/{queue.pk}/fill/").status_code == 404
    assert queue.items.count() == 1
    answer = api_client(user=member(Role.OPERATOR)).post(f"/api/v1/annotation/queues/{queue.pk}/fill/")
    assert answer.status_code == 200
    assert answer.json() == {"queue_id": queue.pk, "item_count": 2}
