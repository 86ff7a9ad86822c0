"""Writes: an annotator going back (the workspace's Previous): changing their own label, which appends a
reward that replaces the one the label made (rewards are never edited), and taking back a skip, so the item
comes to them again. Each in a transaction with its audit event; tenancy by the tenant's rows, and a
person's own labels and skips only (another's is a 404, like a missing one)."""

import uuid

from django.db import transaction

from apps.annotation.models import AnnotationLabel, AnnotationSkip
from apps.audit.services import Actor, audit_record
from apps.core.errors import NotFound
from apps.rewards.choices import RewardSource
from apps.rewards.services import reward_create
from apps.tenants.models import Tenant


@transaction.atomic
def annotation_label_revise(
    *, tenant: Tenant, actor: Actor, user, label_id: int, value: float, label: str = ""
) -> AnnotationLabel:
    """Changes `user`'s label `label_id` to `value` (and `label`, for a categorical spec): a new annotator
    reward on the same target whose reason names the reward it replaces, the label row pointed at it, and
    `annotation_label.revise` audited. The same value again changes nothing. Locking: the label row."""
    row = (
        AnnotationLabel.objects.select_for_update(of=("self",))  # the label row: its reward may be null
        .select_related("item__queue__spec", "reward")
        .filter(tenant=tenant, pk=label_id, annotator=user)
        .first()
    )
    if row is None:
        raise NotFound("no such label of yours", code="label_not_found")
    if row.value == value and row.label == label:
        return row
    replaced = row.reward
    reward, _ = reward_create(
        tenant=tenant,
        actor=actor,
        trajectory_id=row.item.trajectory_id,
        step_id=row.step_id,
        value=value,
        label=label,
        spec_name=row.item.queue.spec.name,
        source=RewardSource.ANNOTATOR,
        created_by=user.get_username(),
        idempotency_key=f"annotation:{row.item_id}:{user.pk}:revision:{uuid.uuid4()}",
        reason=f"replaces reward {replaced.pk} (value {replaced.value})" if replaced else "",
    )
    before = {"value": row.value, "label": row.label}
    row.value, row.label, row.reward = reward.value, reward.label, reward
    row.save(update_fields=["value", "label", "reward"])
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="annotation_label.revise",
        target=row,
        data={"before": before, "after": {"value": row.value, "label": row.label}, "item": row.item_id},
    )
    return row


@transaction.atomic
def annotation_skip_undo(*, tenant: Tenant, actor: Actor, user, skip_id: int) -> int:
    """Takes back `user`'s skip `skip_id`: the item is offered to them again (audited
    `annotation_skip.undo`). Returns the item's id."""
    skip = (
        AnnotationSkip.objects.select_for_update().filter(tenant=tenant, pk=skip_id, annotator=user).first()
    )
    if skip is None:
        raise NotFound("no such skip of yours", code="skip_not_found")
    item_id = skip.item_id
    audit_record(tenant=tenant, actor=actor, verb="annotation_skip.undo", target=skip, data={"item": item_id})
    skip.delete()
    return item_id
