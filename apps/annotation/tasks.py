"""Celery tasks of apps.annotation: queue refills (beat)."""

from celery import shared_task

from apps.annotation.services import dangerously_annotation_queues_fill_all
from areal_web.queues import Queue


@shared_task(name="annotation.fill_queues", queue=Queue.DEFAULT.value, ignore_result=True, max_retries=0)
def fill_annotation_queues() -> int:
    """Beat (every AREAL_ANNOTATION_FILL_SECONDS): adds newly matching trajectories to every annotation queue.
    Idempotent: an item is unique per queue and trajectory, so a second run adds nothing."""
    return dangerously_annotation_queues_fill_all()
