"""The Celery app. Broker and result backend come from settings (Redis, or files under var/ embedded)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "areal_web.settings.local")

app = Celery("areal_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
