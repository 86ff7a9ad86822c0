"""Celery task entrypoints still here (training and online); the others live in their app's tasks.py."""

from workers.tasks import online, training  # noqa: F401
