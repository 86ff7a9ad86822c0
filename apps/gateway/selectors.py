"""Reads of the gateway's own tables, tenant first."""

from apps.gateway.models import StoredResponse


def stored_response_get(*, tenant_id: int, response_id: str) -> StoredResponse | None:
    """The tenant's stored response of that id, or None (another tenant's answers like a missing one)."""
    return StoredResponse.objects.filter(tenant_id=tenant_id, response_id=response_id).first()
