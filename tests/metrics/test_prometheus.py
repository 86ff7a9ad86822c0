"""GET /metrics: the text exposition parses, carries the gateway's per-process counters and the database
gauges, and is refused off the loopback or without the configured token."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.metrics.traffic import gateway_steps_recorded
from apps.releases.models import ReleaseStatus
from tests.metrics.exposition import parse
from tests.releases.factories import ReleaseFactory
from tests.training.factories import TrainingJobFactory
from tests.trajectories.builders import gateway_step, ingested

ROOT = Path(__file__).resolve().parents[2]

# Another web process of this machine: it records a batch of steps as its journal flusher would.
OTHER_PROCESS = """
import json, sys
import django
django.setup()
from apps.metrics.traffic import gateway_steps_recorded
gateway_steps_recorded(json.loads(sys.argv[1]))
"""


@pytest.mark.django_db
def test_metrics_sum_the_counters_of_every_process(client, tenant):
    """A scrape answered by one process counts the calls that another process recorded."""
    requests = (
        "areal_gateway_requests_total",
        frozenset({("tenant_id", str(tenant.pk)), ("endpoint", "chat.completions"), ("outcome", "ok")}),
    )
    latencies = ("areal_gateway_request_duration_seconds_count", frozenset({("tenant_id", str(tenant.pk))}))
    _, before = parse(client.get("/metrics").content.decode())
    records = [gateway_step(tenant, "s", latency_ms=30) for _ in range(3)]
    subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, json.dumps(records)],
        cwd=ROOT,
        check=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "areal_web.settings.test"},
    )
    gateway_steps_recorded(records[:1])

    types, samples = parse(client.get("/metrics").content.decode())

    assert types["areal_gateway_requests_total"] == "counter"
    assert samples[requests] == before.get(requests, 0) + 4
    assert samples[latencies] == before.get(latencies, 0) + 4


@pytest.mark.django_db
def test_metrics_endpoint_reports_gateway_steps_queues_jobs_and_releases(client, tenant, other_tenant):
    ingested(tenant, "s1", [gateway_step(tenant, "s1"), gateway_step(tenant, "s1")])
    ingested(other_tenant, "s2", [gateway_step(other_tenant, "s2")])
    gateway_steps_recorded(
        [gateway_step(tenant, "s1", latency_ms=120), gateway_step(tenant, "s1", error="boom")]
    )
    TrainingJobFactory(tenant=tenant)
    TrainingJobFactory(tenant=tenant, status="running")
    ReleaseFactory(tenant=tenant, status=ReleaseStatus.CANARY)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    types, samples = parse(response.content.decode())
    assert types["areal_gateway_requests_total"] == "counter"
    assert types["areal_gateway_request_duration_seconds"] == "histogram"
    assert types["areal_celery_queue_depth"] == "gauge"
    tenant_label = ("tenant_id", str(tenant.pk))
    assert (
        samples[
            (
                "areal_gateway_requests_total",
                frozenset({tenant_label, ("endpoint", "chat.completions"), ("outcome", "error")}),
            )
        ]
        >= 1
    )
    assert samples[("areal_gateway_request_duration_seconds_count", frozenset({tenant_label}))] >= 2
    assert samples[("areal_steps_recorded", frozenset({("tenant", "acme")}))] == 2
    assert samples[("areal_steps_recorded", frozenset({("tenant", "globex")}))] == 1
    assert samples[("areal_training_jobs", frozenset({("tenant", "acme"), ("status", "queued")}))] == 1
    assert samples[("areal_training_jobs", frozenset({("tenant", "acme"), ("status", "running")}))] == 1
    assert samples[("areal_releases", frozenset({("tenant", "acme"), ("status", "canary")}))] == 1
    for queue in ("default", "ingest", "eval", "train"):
        assert ("areal_celery_queue_depth", frozenset({("queue", queue)})) in samples


@pytest.mark.django_db
def test_queue_depth_counts_waiting_messages(client, settings):
    from apps.core.tasks import ping

    def depth():
        return parse(client.get("/metrics").content.decode())[1][
            ("areal_celery_queue_depth", frozenset({("queue", "eval")}))
        ]

    before = depth()
    ping.apply_async(args=["a"], queue="eval")
    ping.apply_async(args=["b"], queue="eval")
    try:
        assert depth() == before + 2
    finally:
        from areal_web.celery import app

        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge("eval")


@pytest.mark.django_db
def test_metrics_refused_off_the_loopback_and_without_the_token(client, settings):
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    settings.AREAL_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert (
        client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    )


@pytest.mark.django_db
def test_production_metrics_need_the_token_even_on_the_loopback(client, settings):
    """Behind a reverse proxy on the same host every client arrives from the loopback."""
    settings.AREAL_METRICS_ALLOW_LOOPBACK = False
    assert client.get("/metrics").status_code == 403
    settings.AREAL_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
