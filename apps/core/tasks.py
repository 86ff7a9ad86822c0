"""Celery tasks of apps.core: the worker smoke test."""

import os
import socket

from celery import shared_task

from areal_web.queues import Queue


@shared_task(name="core.ping", queue=Queue.DEFAULT.value)
def ping(token: str) -> dict:
    """Answers with the token and where it ran: proves a worker process consumed it from the broker. No
    tenant, no writes: a repeat answers again."""
    return {"token": token, "pid": os.getpid(), "host": socket.gethostname()}
