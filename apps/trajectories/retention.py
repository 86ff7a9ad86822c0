"""Retention: a trajectory past its `retention_until` (recorded when the gateway opened it; for a row
without one, the tenant's `retention_days` after it started) is deleted with everything that holds its
content: its steps (observations, actions, token arrays), rewards (critique text included), reviews,
qualification, annotation items with their labels, comments and corrections (all cascade from the
trajectory), and what other apps quote of it (registered purge listeners: apps.evolution's cluster examples
and harness exemplars). Deleting, not stripping: a stripped row would still carry token ids, tool arguments and reward
labels, and the tenant's policy states how long content may be kept, not which parts of it.

Trajectories in the dataset snapshot of an unfinished training job are held until the job ends (it checks
the snapshot's content hash when it starts or resumes); finished jobs and model versions keep only ids and a
content hash as lineage, and weights already trained keep what they learned. Online runs leave a purged
trajectory out (`training_records`); their consumption rows hold ids only.

`trajectories_purge_expired` works in bounded batches, each its own transaction, and is idempotent (a row
deleted by a concurrent run is simply gone); it records one audit event per run per tenant that purged
something (`trajectory.retention_purge`, with counts). `retention_summary` is the dry run."""

from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.services import Actor, audit_record
from apps.trajectories.models import Step, Trajectory

RETENTION_ACTOR = Actor.system("retention")
# Called with (tenant=, trajectory_ids=) in the transaction that deletes those trajectories, before they go:
# apps that keep text quoted from trajectories (apps.evolution: cluster examples, harness exemplars) register
# here in their AppConfig.ready(), so this app needs no import of theirs.
_PURGE_LISTENERS: list = []


# Called with (tenant=): the ids of the tenant's trajectories another app still needs, which a purge keeps
# past their retention (apps.training: those an unfinished training job reads), registered the same way.
_HOLDERS: list = []


def purge_listener_register(listener) -> None:
    """Registers `listener(*, tenant, trajectory_ids)`, called in each purge batch's transaction."""
    if listener not in _PURGE_LISTENERS:
        _PURGE_LISTENERS.append(listener)


def retention_holder_register(holder) -> None:
    """Registers `holder(*, tenant) -> set of trajectory ids` that a purge must keep."""
    if holder not in _HOLDERS:
        _HOLDERS.append(holder)


def tenant_retention_days(tenant) -> int:
    """The tenant policy's `retention_days` (90 without a policy)."""
    from apps.tenants.models import TenantPolicy

    days = TenantPolicy.objects.filter(tenant=tenant).values_list("retention_days", flat=True).first()
    return 90 if days is None else days


def trajectories_past_retention(*, tenant, now=None):
    """The tenant's trajectories whose retention has run out at `now` (default: now)."""
    now = now or timezone.now()
    started_before = now - timedelta(days=tenant_retention_days(tenant))
    return Trajectory.objects.for_tenant(tenant).filter(
        Q(retention_until__lte=now) | Q(retention_until__isnull=True, started_at__lte=started_before)
    )


def _held_ids(tenant) -> set:
    held: set = set()
    for holder in _HOLDERS:
        held |= holder(tenant=tenant)
    return held


def retention_summary(*, tenant, now=None) -> dict:
    """The dry run: how many of the tenant's trajectories are past retention, how many of those an
    unfinished training job holds, and so how many the next purge deletes. Reads only."""
    due = trajectories_past_retention(tenant=tenant, now=now)
    held = _held_ids(tenant)
    past = due.count()
    held_count = due.filter(pk__in=held).count() if held else 0
    return {
        "retention_days": tenant_retention_days(tenant),
        "past_retention": past,
        "held_by_training": held_count,
        "to_purge": past - held_count,
    }


def _purge_batch(*, tenant, ids: list) -> Counter:
    """Deletes one batch in one transaction. Steps go first in one statement (nothing points at them, so
    they are never loaded); the trajectory delete cascades to rewards, reviews, qualification and
    annotation items and labels."""
    counts: Counter = Counter()
    with transaction.atomic():
        for listener in _PURGE_LISTENERS:  # what other apps quote of them goes in the same transaction
            listener(tenant=tenant, trajectory_ids=ids)
        _, deleted = Step.objects.filter(tenant=tenant, trajectory_id__in=ids).delete()
        counts.update(deleted)
        _, deleted = Trajectory.objects.filter(tenant=tenant, pk__in=ids).delete()
        counts.update(deleted)
    return counts


def trajectories_purge_expired(
    *, tenant, now=None, batch_size: int | None = None, max_batches: int | None = None
) -> dict:
    """Deletes the tenant's trajectories past retention (see the module docstring), at most `max_batches`
    batches of `batch_size` trajectories per call (AREAL_RETENTION_BATCH_SIZE / _MAX_BATCHES_PER_RUN); what
    is left waits for the next run. Tenancy: only `tenant`'s rows. Idempotent: a second run finds nothing.
    Audited once per run when anything was deleted (`trajectory.retention_purge`: counts per table, held,
    remaining). Returns the same summary."""
    now = now or timezone.now()
    batch_size = batch_size or settings.AREAL_RETENTION_BATCH_SIZE
    max_batches = max_batches or settings.AREAL_RETENTION_MAX_BATCHES_PER_RUN
    held = _held_ids(tenant)
    due = trajectories_past_retention(tenant=tenant, now=now)
    purgeable = due.exclude(pk__in=held) if held else due
    counts: Counter = Counter()
    batches = 0
    while batches < max_batches:
        ids = list(purgeable.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        counts.update(_purge_batch(tenant=tenant, ids=ids))
        batches += 1
    summary = {
        "trajectories": counts.get(Trajectory._meta.label, 0),
        "deleted": {label: number for label, number in sorted(counts.items()) if number},
        "held_by_training": due.filter(pk__in=held).count() if held else 0,
        "remaining": purgeable.count() if batches == max_batches else 0,
        "batches": batches,
        "retention_days": tenant_retention_days(tenant),
    }
    if summary["trajectories"]:
        with transaction.atomic():
            audit_record(
                tenant=tenant, actor=RETENTION_ACTOR, verb="trajectory.retention_purge", data=summary
            )
    return summary


def dangerously_trajectories_purge_expired_all(*, now=None) -> dict:
    """Beat's entry: runs `trajectories_purge_expired` for every tenant (a deliberate cross-tenant loop;
    each tenant's rows are still purged and audited separately). Returns {tenant slug: summary} for the
    tenants where something was deleted or remains."""
    from apps.tenants.selectors import tenant_list_all

    results = {}
    for tenant in tenant_list_all():
        summary = trajectories_purge_expired(tenant=tenant, now=now)
        if summary["trajectories"] or summary["remaining"] or summary["held_by_training"]:
            results[tenant.slug] = summary
    return results
