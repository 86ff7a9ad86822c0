"""Gateway traffic: the journal flusher calls `gateway_steps_recorded` once per batch it has written to the
database. It counts the batch into the Prometheus metrics (shared by this host's processes) and publishes one point per tenant on
the tenant's "gateway.traffic" stream. It runs on the gateway's event loop, so it does no I/O of its own:
the channel-layer send is scheduled as a task on that loop."""

import logging
from collections import Counter, defaultdict
from datetime import UTC, datetime

from apps.metrics.exposition import (
    GATEWAY_LATENCY,
    GATEWAY_REQUESTS,
    GATEWAY_TOKEN_VERSION_WARNINGS,
    GATEWAY_TOKENS,
)
from apps.metrics.publish import TRAFFIC_STREAM, metrics_send_now

logger = logging.getLogger(__name__)


def _outcome(record: dict) -> str:
    if record.get("aborted"):
        return "aborted"
    return "error" if record.get("error") else "ok"


def _token_version_warning(record: dict) -> str | None:
    """The code of the warning the gateway put on the step's per-token versions (state.token_versions)."""
    note = (record.get("state") or {}).get("token_versions")
    warning = note.get("warning") if isinstance(note, dict) else None
    return warning.get("code") if isinstance(warning, dict) else None


def traffic_points(records: list[dict]) -> dict[int, dict]:
    """Tenant id → the batch's point: the minute it was flushed in (UTC, naive, as the charts use), request
    and error counts and every latency in ms (the page computes p50/p95 of the minute)."""
    minute = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:00")
    points: dict[int, dict] = {}
    for record in records:
        if record.get("kind", "llm_call") != "llm_call":
            continue
        point = points.setdefault(
            record["tenant_id"], {"minute": minute, "requests": 0, "errors": 0, "latencies_ms": []}
        )
        point["requests"] += 1
        point["errors"] += _outcome(record) != "ok"
        point["latencies_ms"].append(int(record.get("latency_ms") or 0))
    return points


def gateway_steps_recorded(records: list[dict]) -> None:
    """Counts a committed batch of step records and publishes each tenant's traffic point. Never raises:
    a metrics failure must not fail the flusher."""
    try:
        # Summed per label set first: one counter write per label set and batch, not per record (each write
        # is a locked memory-mapped update in prometheus_client's multiprocess mode).
        requests: Counter = Counter()
        tokens: Counter = Counter()
        warnings: Counter = Counter()
        latencies: defaultdict = defaultdict(list)
        for record in records:
            tenant = str(record["tenant_id"])
            warning = _token_version_warning(record)
            if warning:
                warnings[tenant, warning] += 1
            requests[tenant, record.get("endpoint") or "", _outcome(record)] += 1
            latencies[tenant].append((record.get("latency_ms") or 0) / 1000)
            tokens[tenant, "prompt"] += record.get("prompt_tokens") or 0
            tokens[tenant, "completion"] += record.get("completion_tokens") or 0
        for labels, count in requests.items():
            GATEWAY_REQUESTS.labels(*labels).inc(count)
        for labels, count in tokens.items():
            GATEWAY_TOKENS.labels(*labels).inc(count)
        for labels, count in warnings.items():
            GATEWAY_TOKEN_VERSION_WARNINGS.labels(*labels).inc(count)
        for tenant, values in latencies.items():
            histogram = GATEWAY_LATENCY.labels(tenant)
            for value in values:
                histogram.observe(value)
        for tenant_id, point in traffic_points(records).items():
            metrics_send_now(tenant_id=tenant_id, stream=TRAFFIC_STREAM, payload=point)
    except Exception:
        logger.exception("gateway traffic metrics failed for a batch of %d steps", len(records))
