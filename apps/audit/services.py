"""Writing and verifying the audit chain.

`audit_record` must run inside the transaction of the act it records, so the act and its audit row
commit or roll back together. The tenant row is locked to serialize the chain per tenant.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection

from apps.audit.models import AuditEvent

if TYPE_CHECKING:  # apps.audit sits below apps.tenants (which audits its acts): annotations only
    from apps.tenants.models import Tenant

GENESIS_HASH = "0" * 64
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Actor:
    kind: str  # user, api_key or system
    id: str
    label: str

    @classmethod
    def user(cls, user) -> Actor:
        return cls(kind="user", id=str(user.pk), label=user.get_username())

    @classmethod
    def api_key(cls, principal) -> Actor:
        return cls(kind="api_key", id=str(principal.key_id), label=principal.prefix)

    @classmethod
    def system(cls, label: str) -> Actor:
        return cls(kind="system", id="", label=label)


def _event_hash(
    *,
    previous_hash: str,
    tenant_id: int,
    sequence: int,
    occurred_at,
    actor_kind: str,
    actor_id: str,
    actor_label: str,
    verb: str,
    target_type: str,
    target_id: str,
    data,
) -> str:
    canonical = json.dumps(
        {
            "tenant": tenant_id,
            "sequence": sequence,
            "occurred_at": occurred_at.isoformat(),
            "actor": [actor_kind, actor_id, actor_label],
            "verb": verb,
            "target": [target_type, target_id],
            "data": data,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256((previous_hash + canonical).encode()).hexdigest()


def _row_hash(event: AuditEvent) -> str:
    return _event_hash(
        previous_hash=event.previous_hash,
        tenant_id=event.tenant_id,
        sequence=event.sequence,
        occurred_at=event.occurred_at,
        actor_kind=event.actor_kind,
        actor_id=event.actor_id,
        actor_label=event.actor_label,
        verb=event.verb,
        target_type=event.target_type,
        target_id=event.target_id,
        data=event.data,
    )


def audit_record(
    *, tenant: Tenant, actor: Actor, verb: str, target=None, data: dict | None = None
) -> AuditEvent:
    """Appends one event to the tenant's chain. Tenancy: the event belongs to `tenant`. Locking: the
    tenant row (PostgreSQL) or the IMMEDIATE write transaction (SQLite) serializes appends."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the act it records")
    type(tenant).objects.select_for_update().filter(pk=tenant.pk).values_list("pk", flat=True).get()
    last = AuditEvent.objects.filter(tenant=tenant).order_by("-sequence").values("sequence", "hash").first()
    # JSON round trip so the hashed payload is exactly what the database will give back.
    payload = json.loads(json.dumps(data or {}, default=str))
    event = AuditEvent(
        tenant=tenant,
        sequence=(last["sequence"] + 1) if last else 1,
        actor_kind=actor.kind,
        actor_id=actor.id,
        actor_label=actor.label,
        verb=verb,
        target_type=type(target).__name__.lower() if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        data=payload,
        previous_hash=last["hash"] if last else GENESIS_HASH,
    )
    event.hash = _row_hash(event)
    event.save()
    return event


@dataclass(frozen=True)
class ChainBreak:
    tenant_slug: str
    sequence: int
    problem: str


def audit_verify(*, tenant: Tenant) -> list[ChainBreak]:
    """Recomputes the tenant's chain in order; returns every place it breaks (empty: intact)."""
    breaks = []
    expected_previous = GENESIS_HASH
    expected_sequence = 1
    for event in AuditEvent.objects.filter(tenant=tenant).order_by("sequence").iterator(chunk_size=2000):
        if event.sequence != expected_sequence:
            breaks.append(ChainBreak(tenant.slug, event.sequence, f"expected sequence {expected_sequence}"))
        if event.previous_hash != expected_previous:
            breaks.append(
                ChainBreak(tenant.slug, event.sequence, "previous_hash does not match the row before")
            )
        if _row_hash(event) != event.hash:
            breaks.append(ChainBreak(tenant.slug, event.sequence, "content does not match its hash (edited)"))
        expected_previous = event.hash
        expected_sequence = event.sequence + 1
    return breaks


def dangerously_audit_verify_all(tenants: Iterable[Tenant]) -> dict[str, list[int]]:
    """The chains of `tenants` (every tenant: crosses tenants, only for the daily beat task
    audit.verify_chains) verified: {tenant slug: sequences where its chain breaks} for the broken ones, each
    logged as an error. Read-only, so a repeat or a concurrent run is harmless."""
    broken = {}
    for tenant in tenants:
        breaks = audit_verify(tenant=tenant)
        if breaks:
            broken[tenant.slug] = [item.sequence for item in breaks]
            logger.error("audit chain of %s broken at sequences %s", tenant.slug, broken[tenant.slug])
    return broken
