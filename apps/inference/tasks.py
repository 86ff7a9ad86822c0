"""Celery tasks of apps.inference: backend health checks (beat)."""

from celery import shared_task

from apps.inference.services import dangerously_backends_check_all
from areal_web.queues import Queue


@shared_task(name="inference.check_backends", queue=Queue.DEFAULT.value, ignore_result=True)
def check_backends() -> dict:
    """Beat runs this every 15 s: probes every registered backend of every tenant and records up/down.
    Idempotent (a probe result simply overwrites the last); a down backend gets no new sessions."""
    return dangerously_backends_check_all()
