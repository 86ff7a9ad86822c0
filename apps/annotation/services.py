"""Writes: queues (audited), items, labels, skips and reviewers' resolutions of disagreement."""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.annotation.models import AnnotationItem, AnnotationLabel, AnnotationQueue, AnnotationSkip
from apps.annotation.selectors import annotation_item_get, is_assigned
from apps.audit.services import Actor, audit_record
from apps.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from apps.rewards.choices import RewardKind, RewardSource
from apps.rewards.selectors import reward_spec_get
from apps.rewards.services import reward_create
from apps.tenants.models import Membership, Tenant
from apps.tenants.permissions import Action, role_can
from apps.trajectories.selectors import step_exists, trajectory_list

FILTER_NAMES = ("agent", "task_id", "group_id", "status", "purpose")
SAMPLE_SIZE = "sample_size"  # kept with the filters: how many trajectories the queue samples at most
MAX_SAMPLE_SIZE = 100_000
# A refill re-examines trajectories started this long before the last fill: one still running then (say,
# filtered on status=completed) is taken once it matches.
FILL_OVERLAP = timedelta(hours=1)


def annotation_queue_fill(*, queue: AnnotationQueue) -> int:
    """Adds the trajectories matching the queue's filter that are not items yet: all of them the first time,
    then those started since the last fill (less FILL_OVERLAP). A queue with a `sample_size` (in its
    filters) takes a random sample of the matching trajectories until it holds that many items, never the
    whole backlog. Idempotent (the item is unique per queue and trajectory); returns how many items the
    queue has. Called at creation, by the beat task `annotation.fill_queues` and by `POST .../fill/`."""
    now = timezone.now()
    sample_size = queue.filters.get(SAMPLE_SIZE)
    matching = trajectory_list(
        tenant=queue.tenant, **{name: queue.filters.get(name) for name in FILTER_NAMES}
    )
    if queue.filled_at is not None:
        matching = matching.filter(started_at__gte=queue.filled_at - FILL_OVERLAP)
    taken = AnnotationItem.objects.filter(queue=queue).values("trajectory_id")
    candidates = matching.exclude(pk__in=taken).values_list("id", flat=True)
    if sample_size:
        room = int(sample_size) - AnnotationItem.objects.filter(queue=queue).count()
        candidates = candidates.order_by("?")[: max(room, 0)]
    AnnotationItem.objects.bulk_create(
        [
            AnnotationItem(tenant=queue.tenant, queue=queue, trajectory_id=trajectory_id)
            for trajectory_id in candidates
        ],
        ignore_conflicts=True,
    )
    AnnotationQueue.objects.filter(pk=queue.pk).update(filled_at=now)
    queue.filled_at = now
    return AnnotationItem.objects.filter(queue=queue).count()


def dangerously_annotation_queues_fill_all() -> int:
    """Refills every queue of every tenant: cross-tenant by design (the beat task), each queue filled within
    its own tenant. Returns how many queues were filled."""
    queues = list(AnnotationQueue.objects.select_related("tenant").all())
    for queue in queues:
        annotation_queue_fill(queue=queue)
    return len(queues)


@transaction.atomic
def annotation_queue_create(
    *,
    tenant: Tenant,
    actor: Actor,
    name: str,
    spec_id: int,
    filters: dict,
    annotators_per_item: int,
    assignee_ids: list[int],
    sample_size: int | None = None,
) -> AnnotationQueue:
    """Creates a queue over the tenant's trajectories matching `filters` (audited `annotation_queue.create`),
    all of them or, with `sample_size`, a random sample of at most that many. Assignees must be members of
    the tenant whose role may label."""
    spec = reward_spec_get(tenant=tenant, spec_id=spec_id)
    if spec.kind == RewardKind.CRITIQUE:
        raise ValidationFailed(
            "label a scored spec; corrections come with every label",
            fields={"spec_id": ["critique specs cannot be rated"]},
        )
    if not 1 <= annotators_per_item <= 10:
        raise ValidationFailed("annotators_per_item is 1 to 10", fields={"annotators_per_item": ["1 to 10"]})
    unknown = set(filters) - set(FILTER_NAMES)
    if unknown:
        raise ValidationFailed(
            f"unknown filters {sorted(unknown)}", fields={"filters": [f"use {FILTER_NAMES}"]}
        )
    members = Membership.objects.filter(tenant=tenant, user_id__in=assignee_ids)
    allowed = [
        membership.user_id for membership in members if role_can(membership.role, Action.ANNOTATION_LABEL)
    ]
    if len(allowed) != len(set(assignee_ids)):
        raise ValidationFailed(
            "every assignee must be a member who may label",
            fields={"assignee_ids": ["not a labelling member of this tenant"]},
        )
    if sample_size is not None and not 1 <= sample_size <= MAX_SAMPLE_SIZE:
        raise ValidationFailed(
            f"sample_size is 1 to {MAX_SAMPLE_SIZE}", fields={"sample_size": [f"1 to {MAX_SAMPLE_SIZE}"]}
        )
    if sample_size:
        filters = {**filters, SAMPLE_SIZE: sample_size}
    if AnnotationQueue.objects.for_tenant(tenant).filter(name=name).exists():
        raise Conflict(f"a queue named {name!r} exists", code="annotation_queue_exists")
    queue = AnnotationQueue.objects.create(
        tenant=tenant, name=name, spec=spec, filters=filters, annotators_per_item=annotators_per_item
    )
    queue.assignees.set(allowed)
    items = annotation_queue_fill(queue=queue)
    audit_record(
        tenant=tenant,
        actor=actor,
        verb="annotation_queue.create",
        target=queue,
        data={
            "spec": spec.name,
            "filters": filters,
            "annotators_per_item": annotators_per_item,
            "assignees": sorted(allowed),
            "items": items,
        },
    )
    return queue


def _labellable(*, tenant: Tenant, item_id, user) -> AnnotationItem:
    """The item, if this person is assigned to its queue (403 otherwise) and has not seen it yet (409)."""
    item = annotation_item_get(tenant=tenant, item_id=item_id)
    if not is_assigned(queue=item.queue, user=user):
        raise Forbidden("you are not assigned to this annotation queue", code="not_assigned")
    if (
        AnnotationLabel.objects.filter(item=item, annotator=user).exists()
        or AnnotationSkip.objects.filter(item=item, annotator=user).exists()
    ):
        raise Conflict("you have already labelled or skipped this item", code="already_labelled")
    return item


@transaction.atomic
def annotation_label_submit(
    *,
    tenant: Tenant,
    actor: Actor,
    user,
    item_id: int,
    value: float | None = None,
    label: str = "",
    step_id=None,
    comment: str = "",
    correction: str = "",
) -> AnnotationLabel:
    """Stores one annotator's label: checked against the queue's spec (422 naming it), appended as an
    annotator reward on the trajectory or the step, and a correction as a critique reward. Tenancy: the
    item must be the tenant's (404). Not assigned → 403 and nothing stored; a second label by the same
    person → 409. Locking: the item row, so two annotators cannot overfill it."""
    item = _labellable(tenant=tenant, item_id=item_id, user=user)
    AnnotationItem.objects.select_for_update().filter(pk=item.pk).values_list("pk", flat=True).get()
    if item.labels.count() >= item.queue.annotators_per_item:
        raise Conflict("this item has all the labels it needs", code="item_complete")
    if step_id and not step_exists(tenant=tenant, trajectory_id=item.trajectory_id, step_id=step_id):
        raise NotFound("no such step in this trajectory", code="step_not_found")
    key = f"annotation:{item.pk}:{user.pk}"
    reward, _ = reward_create(
        tenant=tenant,
        actor=actor,
        trajectory_id=item.trajectory_id,
        step_id=step_id,
        value=value,
        label=label,
        spec_name=item.queue.spec.name,
        source=RewardSource.ANNOTATOR,
        created_by=user.get_username(),
        idempotency_key=key,
    )
    if correction.strip():
        reward_create(
            tenant=tenant,
            actor=actor,
            trajectory_id=item.trajectory_id,
            step_id=step_id,
            label=correction,
            kind=RewardKind.CRITIQUE,
            source=RewardSource.ANNOTATOR,
            created_by=user.get_username(),
            idempotency_key=key + ":correction",
        )
    try:
        with transaction.atomic():
            return AnnotationLabel.objects.create(
                tenant=tenant,
                item=item,
                annotator=user,
                target=reward.target,
                step_id=reward.step_id,
                value=reward.value,
                label=reward.label,
                comment=comment,
                correction=correction,
                reward=reward,
            )
    except IntegrityError:
        raise Conflict("you have already labelled this item", code="already_labelled") from None


@transaction.atomic
def annotation_skip(*, tenant: Tenant, user, item_id: int) -> AnnotationSkip:
    """Skips an item for this annotator: it is not shown to them again."""
    item = _labellable(tenant=tenant, item_id=item_id, user=user)
    return AnnotationSkip.objects.create(tenant=tenant, item=item, annotator=user)


@transaction.atomic
def annotation_resolve(
    *,
    tenant: Tenant,
    actor: Actor,
    item_id: int,
    value: float | None = None,
    label: str = "",
    reason: str = "",
) -> AnnotationItem:
    """A reviewer's resolution of disagreement: an override reward with the resolved value (it beats every
    source in the training reward), recorded on the item; audited as reward.override. Its source follows
    the actor: annotator for a person, agent for a key (keys never post as annotator)."""
    item = annotation_item_get(tenant=tenant, item_id=item_id)
    reward, _ = reward_create(
        tenant=tenant,
        actor=actor,
        trajectory_id=item.trajectory_id,
        value=value,
        label=label,
        spec_name=item.queue.spec.name,
        source=None,
        created_by=actor.label,
        override=True,
        reason=reason or f"disagreement resolved in queue {item.queue.name}",
        idempotency_key=f"annotation-resolve:{item.pk}:{timezone.now().timestamp()}",
    )
    item.resolved_value, item.resolved_by, item.resolved_at = reward.value, actor.label, timezone.now()
    item.save(update_fields=["resolved_value", "resolved_by", "resolved_at"])
    return item
