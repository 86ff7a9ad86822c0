import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="audit.verify_chains")
def verify_chains() -> dict:
    """Beat runs this daily: recomputes every tenant's audit chain and logs breaks. Read-only, so
    retries and duplicates are harmless."""
    from apps.audit.services import audit_verify
    from apps.tenants.selectors import tenant_list_all

    broken = {}
    for tenant in tenant_list_all():
        breaks = audit_verify(tenant=tenant)
        if breaks:
            broken[tenant.slug] = [item.sequence for item in breaks]
            logger.error("audit chain of %s broken at sequences %s", tenant.slug, broken[tenant.slug])
    return {"broken": broken}
