"""Celery tasks of apps.audit: the daily chain verification (beat)."""

from celery import shared_task

from apps.audit.services import dangerously_audit_verify_all
from apps.tenants.selectors import tenant_list_all


@shared_task(name="audit.verify_chains")
def verify_chains() -> dict:
    """Beat runs this daily: recomputes every tenant's audit chain and logs breaks. Read-only, so
    retries and duplicates are harmless."""
    return {"broken": dangerously_audit_verify_all(tenant_list_all())}
