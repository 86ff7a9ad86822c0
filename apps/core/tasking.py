"""Enqueueing a Celery task by its name: the one way a service or flow starts work on a worker.

A service never imports a `tasks` module (tasks import services; the other way round is a cycle). It names
the task instead (`task_enqueue("training.run_job", job.pk)`), and the task is looked up in the Celery app's
registry. Each task's queue is routed by `areal_web.queues.TASK_QUEUES`; `queue=` overrides it for one call
(the eval and training queues a tenant's settings name).

In a web process the tasks modules are not imported until something asks for them (a worker imports them
all when it starts): the first look-up of a name the registry does not know imports every app's tasks.
"""

from typing import Any

from celery import current_app
from django.db import transaction


def _task(name: str) -> Any:
    tasks = current_app.tasks
    if name not in tasks:
        current_app.loader.import_default_modules()  # autodiscover_tasks(): every installed app's tasks.py
    return tasks[name]  # NotRegistered (a KeyError) for a name no app defines


def task_enqueue(name: str, *args: Any, queue: str | None = None, **kwargs: Any) -> None:
    """Sends task `name` with `args` and `kwargs` now (on its routed queue, or `queue`)."""
    task = _task(name)
    if queue is None:
        task.delay(*args, **kwargs)
    elif kwargs:
        task.apply_async(args=list(args), kwargs=kwargs, queue=queue)
    else:
        task.apply_async(args=list(args), queue=queue)


def task_enqueue_on_commit(name: str, *args: Any, queue: str | None = None, **kwargs: Any) -> None:
    """Sends task `name` once the current transaction commits (at once when none is open): a worker never
    sees a row its caller has not committed yet."""
    _task(name)  # an unknown name fails here, in the caller's transaction, not later on commit
    transaction.on_commit(lambda: task_enqueue(name, *args, queue=queue, **kwargs))
