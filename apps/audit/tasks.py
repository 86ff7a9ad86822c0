"""Celery tasks of apps.audit: the daily chain verification (beat)."""

from celery import shared_task

from apps.audit.services import dangerously_audit_verify_all
from areal_web.queues import Queue


@shared_task(name="audit.verify_chains", queue=Queue.DEFAULT.value)
def verify_chains() -> dict:
    """Beat runs this daily: recomputes every tenant's audit chain and logs breaks. Read-only, so
    retries and duplicates are harmless."""
    return {"broken": dangerously_audit_verify_all()}
