"""The one function domain code uses to push live data to open pages."""

import re

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

STREAM_NAME = re.compile(r"^[a-z0-9_.-]{1,60}$")


def stream_group(*, tenant_id: int, stream: str) -> str:
    if not STREAM_NAME.match(stream):
        raise ValueError(f"stream names use a-z, 0-9, '_', '.', '-' (got {stream!r})")
    return f"tenant-{tenant_id}.{stream}"


def metrics_publish(*, tenant_id: int, stream: str, payload: dict) -> None:
    """Sends `payload` to every page subscribed to the tenant's stream once the current transaction
    commits (at once outside a transaction), so a page never sees data that was rolled back."""
    group = stream_group(tenant_id=tenant_id, stream=stream)

    def send():
        async_to_sync(get_channel_layer().group_send)(
            group, {"type": "stream.event", "stream": stream, "payload": payload}
        )

    transaction.on_commit(send)
