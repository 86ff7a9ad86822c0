"""Celery queue names: the only place they are spelled."""

from enum import StrEnum


class Queue(StrEnum):
    DEFAULT = "default"
    INGEST = "ingest"
    EVAL = "eval"
    TRAIN = "train"


# Every task's queue, by task name: Celery routes each task by this table (settings.CELERY_TASK_ROUTES), so
# the queue a task runs on is spelled here only. A caller may still pick another queue per call
# (`apply_async(queue=...)`, e.g. the eval queue a tenant's settings name).
TASK_QUEUES: dict[str, Queue] = {
    "annotation.fill_queues": Queue.DEFAULT,
    "audit.verify_chains": Queue.DEFAULT,
    "core.ping": Queue.DEFAULT,
    "evaluation.execute_run": Queue.EVAL,
    "evolution.evaluate": Queue.EVAL,
    "evolution.propose": Queue.EVAL,
    "evolution.tick": Queue.DEFAULT,
    "evolution.tick_policy": Queue.DEFAULT,
    "evaluation.requeue_stale": Queue.DEFAULT,
    "inference.check_backends": Queue.DEFAULT,
    "metrics.overview_tick": Queue.DEFAULT,
    "qualification.evaluate": Queue.DEFAULT,
    "releases.analyze": Queue.DEFAULT,
    "releases.analyze_all": Queue.DEFAULT,
    "rewards.run_evaluators": Queue.EVAL,
    "rewards.run_judge": Queue.EVAL,
    "training.requeue_stale": Queue.DEFAULT,
    "training.run_job": Queue.TRAIN,
    "training.run_online": Queue.TRAIN,
    "trajectories.close_idle": Queue.DEFAULT,
    "trajectories.purge_expired": Queue.DEFAULT,
    "trajectories.replay": Queue.EVAL,
}
