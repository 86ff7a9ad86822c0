from django.conf import settings
from django.db import models

from apps.core.models import TenantOwned, TimestampedTenantOwned


class AnnotationQueue(TimestampedTenantOwned):
    """A filter over trajectories, the reward spec to label, how many annotators label each item (for
    agreement) and who is assigned."""

    name = models.CharField(max_length=120)
    spec = models.ForeignKey("rewards.RewardSpec", on_delete=models.PROTECT, related_name="+")
    filters = models.JSONField(
        default=dict, blank=True, help_text="agent, task_id, group_id, status, purpose."
    )
    annotators_per_item = models.PositiveSmallIntegerField(default=1)
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="annotation_queues", blank=True)
    # When the queue last took in matching trajectories; a refill looks at trajectories started since (less
    # FILL_OVERLAP, for those that were still running and did not match yet).
    filled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="annotationqueue_unique_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AnnotationItem(TenantOwned):
    queue = models.ForeignKey(AnnotationQueue, on_delete=models.CASCADE, related_name="items")
    trajectory = models.ForeignKey("trajectories.Trajectory", on_delete=models.CASCADE, related_name="+")
    resolved_value = models.FloatField(
        null=True, blank=True, help_text="A reviewer's resolution of disagreement."
    )
    resolved_by = models.CharField(max_length=200, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "trajectory"], name="annotationitem_unique")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.queue_id}/{self.trajectory_id}"


class AnnotationLabel(TimestampedTenantOwned):
    """One annotator's label on one item (at most one each: an item is never shown twice to one annotator).
    The value is also appended as an annotator reward (`reward`); a correction as a critique reward."""

    item = models.ForeignKey(AnnotationItem, on_delete=models.CASCADE, related_name="labels")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    target = models.CharField(max_length=16, default="trajectory")
    step_id = models.UUIDField(null=True, blank=True)
    value = models.FloatField()
    label = models.CharField(max_length=200, blank=True)
    comment = models.TextField(blank=True)
    correction = models.TextField(blank=True)
    reward = models.OneToOneField("rewards.Reward", null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="annotationlabel_once")]
        ordering = ["item_id", "created_at"]

    def __str__(self) -> str:
        return f"{self.value} by {self.annotator_id} on {self.item_id}"


class AnnotationSkip(TimestampedTenantOwned):
    item = models.ForeignKey(AnnotationItem, on_delete=models.CASCADE, related_name="skips")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="annotationskip_once")]

    def __str__(self) -> str:
        return f"skip {self.item_id} by {self.annotator_id}"
