"""The qualification app's choices and status sets: the one place other apps read them from (models.py re-exports
them for migrations and this app's own code)."""

from django.db import models


class ReviewStatus(models.TextChoices):
    UNREVIEWED = "unreviewed"
    APPROVED = "approved"
    REJECTED = "rejected"
    NEEDS_CHANGES = "needs_changes"


class QualificationStatus(models.TextChoices):
    PENDING = "pending"
    QUALIFIED = "qualified"
    DISQUALIFIED = "disqualified"
