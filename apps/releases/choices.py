"""The releases app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class ReleaseStatus(models.TextChoices):
    DRAFT = "draft"
    EVALUATING = "evaluating"
    CANARY = "canary"
    PAUSED = "paused", "Paused (inconclusive; an operator decides)"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"
    ABORTED = "aborted"


ACTIVE_STATUSES = (
    ReleaseStatus.DRAFT,
    ReleaseStatus.EVALUATING,
    ReleaseStatus.CANARY,
    ReleaseStatus.PAUSED,
    ReleaseStatus.AWAITING_APPROVAL,
)


# Statuses in which the candidate takes live traffic, so ticks measure it.
SERVING_STATUSES = (ReleaseStatus.CANARY, ReleaseStatus.PAUSED, ReleaseStatus.AWAITING_APPROVAL)
