"""Prometheus metrics through prometheus_client, in its multiprocess mode.

Every web process (uvicorn `--workers N`, several hosts' processes each scraped on their host) writes its
counters and histogram to memory-mapped files under PROMETHEUS_MULTIPROC_DIR (set by the settings, under
the var directory unless given); a scrape of any process sums every process's files, so /metrics counts
the requests of all of this machine's processes whichever worker answers. Gauges read from the database
and the broker at scrape time are a collector of their own (`ScrapedGauges`), the same from any process.
"""

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from areal_web.env import env_str

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Created unregistered: a scrape builds a fresh registry (see render).
GATEWAY_REQUESTS = Counter(
    "areal_gateway_requests_total",
    "Gateway calls recorded, by tenant, endpoint and outcome (all processes of this host).",
    ("tenant_id", "endpoint", "outcome"),
    registry=None,
)
GATEWAY_LATENCY = Histogram(
    "areal_gateway_request_duration_seconds",
    "Latency of gateway calls recorded (request to last byte; all processes of this host).",
    ("tenant_id",),
    buckets=LATENCY_BUCKETS,
    registry=None,
)
GATEWAY_TOKENS = Counter(
    "areal_gateway_tokens_total",
    "Tokens of gateway calls recorded (all processes of this host).",
    ("tenant_id", "kind"),
    registry=None,
)
GATEWAY_TOKEN_VERSION_WARNINGS = Counter(
    "areal_gateway_token_version_warnings_total",
    "Steps recorded whose per-token policy versions carry a warning, by tenant and reason: unknown_version (no "
    "version could be derived: tokens recorded as -1) or swap_split_unknown (a weight swap finished during a "
    "whole answer: all tokens given the older version). All processes of this host.",
    ("tenant_id", "reason"),
    registry=None,
)
PROCESS_METRICS = (GATEWAY_REQUESTS, GATEWAY_LATENCY, GATEWAY_TOKENS, GATEWAY_TOKEN_VERSION_WARNINGS)


@dataclass(frozen=True)
class ScrapedGauge:
    """A gauge read when scraped: `collect()` returns {label values: value}."""

    name: str
    help: str
    labels: tuple[str, ...]
    collect: Callable[[], dict]


class ScrapedGauges:
    """A prometheus_client collector over ScrapedGauge callbacks."""

    def __init__(self, gauges):
        self.gauges = tuple(gauges)

    def collect(self):
        for gauge in self.gauges:
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=gauge.labels)
            for key, value in sorted(gauge.collect().items()):
                family.add_metric([str(part) for part in key], value)
            yield family


def multiprocess_directory() -> str | None:
    return env_str("PROMETHEUS_MULTIPROC_DIR", "") or None  # the settings set it (AREAL_PROMETHEUS_DIR)


def render(*collectors) -> bytes:
    """The text exposition of the process metrics (summed over every process writing to the multiprocess
    directory; this process's own without one) and of `collectors`."""
    registry = CollectorRegistry()
    if multiprocess_directory():
        MultiProcessCollector(registry)
    else:
        for metric in PROCESS_METRICS:
            registry.register(metric)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
