"""Prometheus text exposition format 0.0.4, written here (a counter, a histogram, gauges from callbacks):
small enough not to need prometheus_client. Per-process metrics live in this module's REGISTRY."""

import math
import threading
from collections.abc import Callable, Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple, extra: str = "") -> str:
    parts = [f'{name}="{_escape(value)}"' for name, value in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Counter:
    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = ()):
        self.name, self.help, self.label_names = name, help_text, labels
        self.values: dict[tuple, float] = {}
        self.lock = threading.Lock()

    def inc(self, *labels, amount: float = 1.0) -> None:
        with self.lock:
            self.values[labels] = self.values.get(labels, 0.0) + amount

    def samples(self) -> list[str]:
        with self.lock:
            return [f"{self.name}{_labels(self.label_names, key)} {_number(value)}" for key, value in self.values.items()]


class Histogram:
    kind = "histogram"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = (), buckets=LATENCY_BUCKETS):
        self.name, self.help, self.label_names, self.buckets = name, help_text, labels, tuple(buckets)
        self.values: dict[tuple, list] = {}  # labels → [bucket counts..., sum, count]
        self.lock = threading.Lock()

    def observe(self, *labels, value: float) -> None:
        with self.lock:
            row = self.values.setdefault(labels, [0] * len(self.buckets) + [0.0, 0])
            for index, bound in enumerate(self.buckets):
                if value <= bound:
                    row[index] += 1
            row[-2] += value
            row[-1] += 1

    def samples(self) -> list[str]:
        lines = []
        with self.lock:
            for key, row in self.values.items():
                for bound, count in zip(self.buckets, row, strict=False):
                    bucket = _labels(self.label_names, key, 'le="' + _number(bound) + '"')
                    lines.append(f"{self.name}_bucket{bucket} {count}")
                infinite = _labels(self.label_names, key, 'le="+Inf"')
                lines.append(f"{self.name}_bucket{infinite} {row[-1]}")
                lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {_number(row[-2])}")
                lines.append(f"{self.name}_count{_labels(self.label_names, key)} {row[-1]}")
        return lines


class Gauge:
    """Read when scraped: `collect()` returns {label values: value}."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...], collect: Callable[[], dict]):
        self.name, self.help, self.label_names, self.collect = name, help_text, labels, collect

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(self.label_names, key)} {_number(value)}"
                for key, value in sorted(self.collect().items())]


def render(families: Iterable) -> str:
    lines = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines.extend(family.samples())
    return "\n".join(lines) + "\n"


GATEWAY_REQUESTS = Counter("areal_gateway_requests_total",
                           "Gateway calls recorded by this process, by tenant, endpoint and outcome.",
                           ("tenant_id", "endpoint", "outcome"))
GATEWAY_LATENCY = Histogram("areal_gateway_request_duration_seconds",
                            "Latency of gateway calls recorded by this process (request to last byte).",
                            ("tenant_id",))
GATEWAY_TOKENS = Counter("areal_gateway_tokens_total", "Tokens of gateway calls recorded by this process.",
                         ("tenant_id", "kind"))
REGISTRY = (GATEWAY_REQUESTS, GATEWAY_LATENCY, GATEWAY_TOKENS)
