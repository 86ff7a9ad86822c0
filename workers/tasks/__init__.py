"""Celery task entrypoints. Each module registers its tasks on import; add new modules here."""

from workers.tasks import audit, core  # noqa: F401
