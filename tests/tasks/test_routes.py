"""Every task has an explicit queue: the routes table names each registered task, and nothing else."""

from django.conf import settings

from areal_web.celery import app
from areal_web.queues import TASK_QUEUES, Queue


def _registered_task_names() -> set[str]:
    app.loader.import_default_modules()  # autodiscover_tasks(): every app's tasks.py
    return {name for name in app.tasks if not name.startswith("celery.")}


def test_every_registered_task_has_a_queue_in_the_table_and_the_table_names_no_stray_task():
    assert _registered_task_names() == set(TASK_QUEUES)


def test_a_task_is_routed_to_its_queue():
    router = app.amqp.router
    assert settings.CELERY_TASK_ROUTES["training.run_job"] == {"queue": Queue.TRAIN.value}
    assert router.route({}, "training.run_job")["queue"].name == Queue.TRAIN.value
    assert router.route({}, "evaluation.execute_run")["queue"].name == Queue.EVAL.value
    assert router.route({}, "core.ping")["queue"].name == Queue.DEFAULT.value


def test_a_caller_may_still_name_another_queue_for_one_call():
    assert app.amqp.router.route({"queue": "eval-b"}, "evaluation.execute_run")["queue"].name == "eval-b"
