"""The embedded relay channel layer across two real processes, and its cleanup of departed ones."""

import os
import subprocess
import sys
import textwrap
import uuid

from apps.metrics.layers import ProcessRelayChannelLayer


async def test_group_message_from_another_process_reaches_a_local_member(tmp_path):
    layer = ProcessRelayChannelLayer(directory=str(tmp_path))
    channel = await layer.new_channel()
    await layer.group_add("tenant-1.traffic", channel)
    script = textwrap.dedent(f"""
        import asyncio
        from apps.metrics.layers import ProcessRelayChannelLayer
        layer = ProcessRelayChannelLayer(directory={str(tmp_path)!r})
        asyncio.run(layer.group_send("tenant-1.traffic", {{"type": "stream.event", "payload": {{"n": 7}}}}))
        asyncio.run(layer.group_send("tenant-2.traffic", {{"type": "stream.event", "payload": {{"n": -1}}}}))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=os.getcwd(), timeout=60)
    message = await layer.receive(channel)
    assert message == {"type": "stream.event", "payload": {"n": 7}}
    assert layer.channels.get(channel) is None or layer.channels[channel].empty()
    await layer.flush()


async def test_a_departed_process_is_forgotten(tmp_path):
    gone = tmp_path / "4194303"  # above any pid this machine hands out by default; nobody listens there
    gone.touch()
    layer = ProcessRelayChannelLayer(directory=str(tmp_path))
    await layer.group_send(f"tenant-1.{uuid.uuid4().hex[:6]}", {"type": "stream.event", "payload": {}})
    assert not gone.exists()
