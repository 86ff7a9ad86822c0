"""The Celery app. Broker and result backend come from settings (Redis, or files under var/ embedded).

Tasks live in each app's `tasks.py`; `autodiscover_tasks()` imports them (every installed app's) when a
worker or beat starts, so every process started with `-A areal_web` knows every task by name."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")

app = Celery("areal_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
