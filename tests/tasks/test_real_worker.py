"""Tasks executed by a real Celery worker process over the configured broker (Redis on CI, the
filesystem broker embedded), reading the test database."""

import os
import uuid

import pytest

from apps.audit.models import AuditEvent
from apps.audit.services import Actor
from apps.audit.tasks import verify_chains
from apps.core.tasks import ping
from apps.tenants.services import policy_update
from tests.workers_support import celery_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_ping_runs_in_another_process(tmp_path):
    token = uuid.uuid4().hex
    with celery_worker(log_path=tmp_path / "worker.log") as (worker, queue):
        answer = ping.apply_async(args=[token], queue=queue).get(timeout=90)
    assert answer["token"] == token
    assert answer["pid"] == worker.pid != os.getpid()


def test_worker_reads_the_database(tmp_path, tenant):
    policy_update(tenant=tenant, actor=Actor.system("test"), changes={"retention_days": 3})
    policy_update(tenant=tenant, actor=Actor.system("test"), changes={"retention_days": 4})
    AuditEvent.objects.filter(tenant=tenant, sequence=1).dangerously_writable().update(verb="tampered")
    with celery_worker(log_path=tmp_path / "worker.log") as (_, queue):
        answer = verify_chains.apply_async(queue=queue).get(timeout=90)
    assert answer == {"broken": {"acme": [1]}}
