"""A worker SIGKILLed in the middle of an eval run: beat's requeue hands the run to another worker, which
scores only the cases not yet scored, and the run finishes with one result per case."""

import os
import signal
import time

import pytest

from apps.evaluation.models import EvalCaseResult, EvalRun, RunStatus
from apps.evaluation.services import (
    eval_case_create,
    eval_run_start,
    eval_runs_requeue_stale,
    eval_suite_create,
)
from apps.inference.models import BackendKind, BackendState
from tests.gateway.conftest import MODEL, embedded_backend_url, gateway  # noqa: F401  (fixtures)
from tests.inference.factories import BackendFactory
from tests.releases.helpers import SYSTEM
from tests.training.helpers import base_version
from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from tests.workers_support import celery_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]
CASES = 12


def wait_for(predicate, *, timeout=240, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def scored(run_id) -> int:
    return EvalCaseResult.objects.filter(run_id=run_id).count()


def test_a_run_whose_worker_is_killed_is_requeued_and_finishes_once_per_case(
    tmp_path, tenant, gateway, embedded_backend_url, default_model_dir, settings, monkeypatch
):  # noqa: F811
    url, _ = gateway
    version = base_version(tenant, default_model_dir, name=MODEL)
    BackendFactory(
        tenant=tenant,
        name="embedded",
        base_url=embedded_backend_url,
        kind=BackendKind.EMBEDDED,
        served_model=MODEL,
        model_version=str(version.number),
        state=BackendState.UP,
    )
    suite = eval_suite_create(tenant=tenant, actor=SYSTEM, name="long-suite")
    for index in range(CASES):
        eval_case_create(
            tenant=tenant,
            actor=SYSTEM,
            suite_id=suite.pk,
            key=f"case-{index:02d}",
            input_messages=[{"role": "user", "content": f"Say something about {index}."}],
            params={"max_tokens": 24, "temperature": 0},
            scorer="regex",
            scorer_config={"pattern": "."},
        )
    monkeypatch.setenv("AREAL_GATEWAY_URL", url)  # the worker processes call this test's gateway

    with celery_worker(log_path=tmp_path / "first.log") as (first, queue):
        settings.AREAL_EVAL_QUEUE = queue
        run = eval_run_start(tenant=tenant, actor=SYSTEM, suite_id=suite.pk, version_id=version.pk)
        wait_for(lambda: scored(run.pk) >= 2, what="a few cases scored")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=20)
    killed_at = scored(run.pk)
    assert EvalRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert killed_at < CASES

    # A live worker's run is not taken from it: the heartbeat is fresh.
    assert eval_runs_requeue_stale(stale_after_seconds=3600) == []
    with celery_worker(queue=queue, log_path=tmp_path / "second.log"):
        assert eval_runs_requeue_stale(stale_after_seconds=0) == [run.pk]
        wait_for(
            lambda: EvalRun.objects.get(pk=run.pk).status in (RunStatus.SUCCEEDED, RunStatus.FAILED),
            what="the requeued run to finish",
        )
    run = EvalRun.objects.get(pk=run.pk)
    assert run.status == RunStatus.SUCCEEDED, (run.error, (tmp_path / "second.log").read_text()[-3000:])
    keys = list(EvalCaseResult.objects.filter(run=run).values_list("case__key", flat=True))
    assert sorted(keys) == [f"case-{index:02d}" for index in range(CASES)]  # each case once
    assert (run.summary["cases"], run.summary["errors"]) == (CASES, 0)
    assert run.tenant.audit_events.filter(verb="eval_run.requeue").count() == 1
