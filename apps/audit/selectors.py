from __future__ import annotations

from typing import TYPE_CHECKING

from apps.audit.models import AuditEvent

if TYPE_CHECKING:  # apps.audit sits below apps.tenants (which audits its acts): annotations only
    from apps.tenants.models import Tenant


def audit_event_list(
    *, tenant: Tenant, verb: str | None = None, actor: str | None = None, since=None, until=None
):
    events = AuditEvent.objects.for_tenant(tenant)
    if verb:
        events = events.filter(verb__startswith=verb)
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if since:
        events = events.filter(occurred_at__gte=since)
    if until:
        events = events.filter(occurred_at__lt=until)
    return events.order_by("-sequence")


def audit_verbs(*, tenant: Tenant) -> list[str]:
    """The verbs this tenant's audit log holds, alphabetically (the console's verb filter offers these)."""
    return list(
        AuditEvent.objects.for_tenant(tenant).order_by("verb").values_list("verb", flat=True).distinct()
    )
