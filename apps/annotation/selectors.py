"""Reads: queues, the next item for an annotator, progress, agreement, per-annotator stats, disagreements
and label export. Tenant first."""

from collections import Counter, defaultdict

from django.db.models import Count, Exists, OuterRef

from apps.annotation.models import AnnotationItem, AnnotationLabel, AnnotationQueue, AnnotationSkip
from apps.core.selectors import get_in_tenant
from apps.tenants.models import Tenant
from workers.rewards.agreement import cohen_kappa, krippendorff_alpha


def annotation_queue_list(*, tenant: Tenant, assigned_to=None):
    queues = AnnotationQueue.objects.for_tenant(tenant).select_related("spec")
    if assigned_to is not None:
        queues = queues.filter(assignees=assigned_to)
    return queues.annotate(item_count=Count("items", distinct=True)).order_by("name")


def annotation_queue_get(*, tenant: Tenant, queue_id) -> AnnotationQueue:
    return get_in_tenant(
        AnnotationQueue.objects.select_related("spec"),
        tenant=tenant,
        pk=queue_id,
        code="annotation_queue_not_found",
    )


def annotation_item_get(*, tenant: Tenant, item_id) -> AnnotationItem:
    return get_in_tenant(
        AnnotationItem.objects.select_related("queue__spec", "trajectory"),
        tenant=tenant,
        pk=item_id,
        code="annotation_item_not_found",
    )


def is_assigned(*, queue, user) -> bool:
    return queue.assignees.filter(pk=user.pk).exists()


def annotation_next_item(*, queue, user) -> AnnotationItem | None:
    """The first item that still needs labels and that this annotator has neither labelled nor skipped:
    an item is never shown twice to one annotator."""
    return (
        AnnotationItem.objects.filter(queue=queue)
        .annotate(label_count=Count("labels", distinct=True))
        .filter(label_count__lt=queue.annotators_per_item)
        .exclude(Exists(AnnotationLabel.objects.filter(item=OuterRef("pk"), annotator=user)))
        .exclude(Exists(AnnotationSkip.objects.filter(item=OuterRef("pk"), annotator=user)))
        .select_related("trajectory")
        .order_by("id")
        .first()
    )


def annotation_progress(*, queue, user=None) -> dict:
    items = AnnotationItem.objects.filter(queue=queue).annotate(label_count=Count("labels"))
    total = items.count()
    done = items.filter(label_count__gte=queue.annotators_per_item).count()
    progress = {
        "items": total,
        "complete": done,
        "labels": AnnotationLabel.objects.filter(item__queue=queue).count(),
        "labels_needed": total * queue.annotators_per_item,
    }
    if user is not None:
        progress["mine"] = AnnotationLabel.objects.filter(item__queue=queue, annotator=user).count()
        progress["skipped"] = AnnotationSkip.objects.filter(item__queue=queue, annotator=user).count()
    return progress


def _labels(queue):
    return AnnotationLabel.objects.filter(item__queue=queue).select_related("annotator")


def annotation_agreement(*, queue) -> dict:
    """Agreement over items (and steps) labelled by more than one annotator, at the level the spec implies
    (numeric: interval; boolean, categorical: nominal). Cohen's kappa when exactly two annotators."""
    level = "interval" if queue.spec.kind == "numeric" else "nominal"
    units: dict[tuple, dict[int, float]] = defaultdict(dict)
    for label in _labels(queue):
        units[(label.item_id, label.step_id)][label.annotator_id] = label.value
    annotators = sorted({annotator for values in units.values() for annotator in values})
    shared = [values for values in units.values() if len(values) > 1]
    kappa = None
    if len(annotators) == 2 and level == "nominal":
        first, second = annotators
        kappa = cohen_kappa(
            [(values[first], values[second]) for values in shared if first in values and second in values]
        )
    alpha = krippendorff_alpha([list(values.values()) for values in shared], level)
    return {
        "level": level,
        "annotators": len(annotators),
        "shared_units": len(shared),
        "cohen_kappa": kappa,
        "krippendorff_alpha": alpha,
    }


def annotation_annotator_stats(*, queue) -> list[dict]:
    """Per annotator: labels, skips, mean value, and how often they agree with the item's majority."""
    by_item: dict[int, list] = defaultdict(list)
    for label in _labels(queue):
        by_item[label.item_id].append(label)
    stats: dict[int, dict] = {}
    for labels in by_item.values():
        majority, _ = Counter(label.value for label in labels).most_common(1)[0]
        for label in labels:
            row = stats.setdefault(
                label.annotator_id,
                {
                    "annotator": label.annotator.get_username(),
                    "labels": 0,
                    "total": 0.0,
                    "shared": 0,
                    "with_majority": 0,
                },
            )
            row["labels"] += 1
            row["total"] += label.value
            if len(labels) > 1:
                row["shared"] += 1
                row["with_majority"] += label.value == majority
    skips = Counter(AnnotationSkip.objects.filter(item__queue=queue).values_list("annotator_id", flat=True))
    return [
        {
            "annotator": row["annotator"],
            "labels": row["labels"],
            "skips": skips.get(annotator_id, 0),
            "mean_value": row["total"] / row["labels"],
            "majority_agreement": row["with_majority"] / row["shared"] if row["shared"] else None,
        }
        for annotator_id, row in sorted(stats.items(), key=lambda pair: pair[1]["annotator"])
    ]


def annotation_disagreements(*, queue):
    """Unresolved items whose annotators gave different values."""
    return (
        AnnotationItem.objects.filter(queue=queue, resolved_at__isnull=True)
        .annotate(distinct_values=Count("labels__value", distinct=True))
        .filter(distinct_values__gt=1)
        .select_related("trajectory")
        .prefetch_related("labels__annotator")
        .order_by("id")
    )


def annotation_label_rows(*, queue):
    """Every label of the queue, for export, in item order."""
    for label in _labels(queue).select_related("item").order_by("item_id", "created_at"):
        yield {
            "queue": queue.name,
            "spec": queue.spec.name,
            "item_id": label.item_id,
            "trajectory_id": str(label.item.trajectory_id),
            "target": label.target,
            "step_id": str(label.step_id) if label.step_id else None,
            "annotator": label.annotator.get_username(),
            "value": label.value,
            "label": label.label or None,
            "comment": label.comment or None,
            "correction": label.correction or None,
            "created_at": label.created_at.isoformat(),
            "resolved_value": label.item.resolved_value,
        }


def annotation_item_list(*, queue):
    """The queue's items in order, each with its `label_count` and `skip_count`, trajectory loaded (the
    queue page lists them a page at a time)."""
    return (
        AnnotationItem.objects.filter(queue=queue)
        .annotate(label_count=Count("labels", distinct=True), skip_count=Count("skips", distinct=True))
        .select_related("trajectory")
        .order_by("id")
    )


def annotation_previous(*, queue, user):
    """What `user` did last in `queue`: ("label", their newest label) or ("skip", their newest skip), or
    None. The workspace's Previous shows it, to change the label or take the skip back."""
    label = (
        AnnotationLabel.objects.filter(item__queue=queue, annotator=user)
        .select_related("item__trajectory")
        .order_by("-created_at", "-id")
        .first()
    )
    skip = (
        AnnotationSkip.objects.filter(item__queue=queue, annotator=user)
        .select_related("item__trajectory")
        .order_by("-created_at", "-id")
        .first()
    )
    if label is None and skip is None:
        return None
    if skip is None or (label is not None and label.created_at >= skip.created_at):
        return ("label", label)
    return ("skip", skip)
