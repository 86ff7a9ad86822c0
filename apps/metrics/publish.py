"""The one function domain code uses to push live data to open pages."""

import asyncio
import re
from datetime import UTC

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

STREAM_NAME = re.compile(r"^[a-z0-9_.-]{1,60}$")

# Tenant-wide streams the overview page listens to (besides training.jobs and release-<id>).
TRAFFIC_STREAM = "gateway.traffic"
OUTCOMES_STREAM = "overview.outcomes"

_pending_sends: set[asyncio.Task] = set()


def chart_time(moment) -> str:
    """Charts use naive UTC strings: Plotly ignores time zones, and live points use the same form."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def stream_group(*, tenant_id: int, stream: str) -> str:
    if not STREAM_NAME.match(stream):
        raise ValueError(f"stream names use a-z, 0-9, '_', '.', '-' (got {stream!r})")
    return f"tenant-{tenant_id}.{stream}"


def metrics_publish(*, tenant_id: int, stream: str, payload: dict) -> None:
    """Sends `payload` to every page subscribed to the tenant's stream once the current transaction
    commits (at once outside a transaction), so a page never sees data that was rolled back."""
    group = stream_group(tenant_id=tenant_id, stream=stream)
    transaction.on_commit(lambda: _send(group, stream, payload))


def metrics_send_now(*, tenant_id: int, stream: str, payload: dict) -> None:
    """For apps.metrics' own publishers of data already committed (the gateway's flushed batches): sends at
    once; on a running event loop the send is scheduled on it instead of blocking it."""
    _send(stream_group(tenant_id=tenant_id, stream=stream), stream, payload)


def _send(group: str, stream: str, payload: dict) -> None:
    message = {"type": "stream.event", "stream": stream, "payload": payload}
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(get_channel_layer().group_send)(group, message)
        return
    task = loop.create_task(get_channel_layer().group_send(group, message))
    _pending_sends.add(task)
    task.add_done_callback(_pending_sends.discard)
