"""Celery task entrypoints. Each module registers its tasks on import; add new modules here."""

from workers.tasks import (  # noqa: F401
    annotation,
    audit,
    core,
    evaluation,
    inference,
    online,
    qualification,
    releases,
    rewards,
    training,
    trajectories,
)
