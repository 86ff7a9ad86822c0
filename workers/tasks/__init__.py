"""Celery task entrypoints. Each module registers its tasks on import; add new modules here."""

from workers.tasks import audit, core, inference  # noqa: F401
