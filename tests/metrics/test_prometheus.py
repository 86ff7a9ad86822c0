"""GET /metrics: the text exposition parses, carries the gateway's per-process counters and the database
gauges, and is refused off the loopback or without the configured token."""

import re

import pytest

from apps.metrics.exposition import Counter, Histogram, render
from apps.metrics.traffic import gateway_steps_recorded
from apps.releases.models import ReleaseStatus
from tests.releases.helpers import release_row
from tests.training.helpers import queued_job
from tests.trajectories.builders import gateway_step, ingested

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> tuple[dict, dict]:
    """(types by family, {(name, frozenset(labels)): value}); fails on any line that is not valid."""
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            match = SAMPLE.match(line)
            assert match, f"not an exposition line: {line!r}"
            name, labels, value = match.groups()
            samples[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return types, samples


def test_exposition_of_a_counter_and_a_histogram():
    counter = Counter("things_total", 'Things, "quoted"\nand two lines.', ("kind",))
    counter.inc('a"b')
    counter.inc('a"b', amount=2)
    histogram = Histogram("wait_seconds", "Waits.", ("kind",), buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 3.0):
        histogram.observe("x", value=value)
    types, samples = parse(render([counter, histogram]))
    assert types == {"things_total": "counter", "wait_seconds": "histogram"}
    assert samples[("things_total", frozenset({("kind", 'a\\"b')}))] == 3
    assert [samples[("wait_seconds_bucket", frozenset({("kind", "x"), ("le", le)}))] for le in ("0.1", "1", "+Inf")] == [
        1, 2, 3]
    assert samples[("wait_seconds_count", frozenset({("kind", "x")}))] == 3
    assert samples[("wait_seconds_sum", frozenset({("kind", "x")}))] == pytest.approx(3.55)


@pytest.mark.django_db
def test_metrics_endpoint_reports_gateway_steps_queues_jobs_and_releases(client, tenant, other_tenant):
    ingested(tenant, "s1", [gateway_step(tenant, "s1"), gateway_step(tenant, "s1")])
    ingested(other_tenant, "s2", [gateway_step(other_tenant, "s2")])
    gateway_steps_recorded([gateway_step(tenant, "s1", latency_ms=120), gateway_step(tenant, "s1", error="boom")])
    queued_job(tenant)
    queued_job(tenant, status="running")
    release_row(tenant, ReleaseStatus.CANARY)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    types, samples = parse(response.content.decode())
    assert types["areal_gateway_requests_total"] == "counter"
    assert types["areal_gateway_request_duration_seconds"] == "histogram"
    assert types["areal_celery_queue_depth"] == "gauge"
    tenant_label = ("tenant_id", str(tenant.pk))
    assert samples[("areal_gateway_requests_total",
                    frozenset({tenant_label, ("endpoint", "chat.completions"), ("outcome", "error")}))] >= 1
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
    from workers.tasks.core import ping

    def depth():
        return parse(client.get("/metrics").content.decode())[1][("areal_celery_queue_depth",
                                                                   frozenset({("queue", "eval")}))]

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
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
