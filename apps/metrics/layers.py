"""The embedded default's channel layer: in-memory, plus group messages relayed between the processes of
one machine that share a var directory (web, Celery workers, beat), so that a point a worker publishes
reaches a page served by the web process. Production uses channels-redis instead (REDIS_URL).

How: a process that has consumers (it called `group_add`) binds a Unix datagram socket in the Linux
abstract namespace, named after the var directory and its pid, and leaves a file named by its pid in
`<var>/live/`. `group_send` delivers locally, then sends one datagram per listed process; the receiver
hands it to its own in-memory groups on its event loop. A process that has gone refuses the datagram
(ECONNREFUSED) and its file is removed. Delivery is best effort, like the Redis layer's: a datagram that
cannot be sent (receiver's buffer full, message over ~200 KB) is dropped and logged.
"""

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
from pathlib import Path

from channels.layers import InMemoryChannelLayer

logger = logging.getLogger(__name__)

MAX_DATAGRAM = 256 * 1024


class ProcessRelayChannelLayer(InMemoryChannelLayer):
    def __init__(self, directory: str | None = None, **kwargs):
        super().__init__(**kwargs)
        if directory is None:
            from django.conf import settings

            directory = str(settings.VAR_DIR / "live")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.namespace = hashlib.sha256(str(self.directory.resolve()).encode()).hexdigest()[:16]
        self.listener: socket.socket | None = None
        self.listener_loop: asyncio.AbstractEventLoop | None = None
        self.sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sender.setblocking(False)
        self.sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_DATAGRAM)

    def address(self, pid: int) -> str:
        return f"\0areal-live-{self.namespace}-{pid}"

    async def group_add(self, group, channel):
        await super().group_add(group, channel)
        self._listen(asyncio.get_running_loop())

    async def group_send(self, group, message):
        await super().group_send(group, message)
        self.relay(group, message)

    def relay(self, group: str, message: dict) -> None:
        """Sends the group message to every other listening process (non-blocking)."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return
        data = None
        own = os.getpid()
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == own:
                continue
            if data is None:
                data = json.dumps([group, message], separators=(",", ":"), default=str).encode()
            try:
                self.sender.sendto(data, self.address(int(entry.name)))
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)  # that process is gone
            except OSError as error:  # buffer full, message too large
                logger.warning("live message to %s dropped for process %s: %s", group, entry.name, error)

    def _listen(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.listener is not None and self.listener_loop is loop and not loop.is_closed():
            return
        self._stop_listening()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MAX_DATAGRAM)
        listener.bind(self.address(os.getpid()))
        listener.setblocking(False)
        loop.add_reader(listener.fileno(), self._receive)
        self.listener, self.listener_loop = listener, loop
        (self.directory / str(os.getpid())).touch()

    def _stop_listening(self) -> None:
        if self.listener is None or self.listener_loop is None:  # the two are set together
            return
        with contextlib.suppress(Exception):
            self.listener_loop.remove_reader(self.listener.fileno())
        self.listener.close()
        self.listener = self.listener_loop = None

    def _receive(self) -> None:
        while self.listener is not None and self.listener_loop is not None:  # set together
            try:
                data = self.listener.recv(MAX_DATAGRAM)
            except BlockingIOError:
                return
            try:
                group, message = json.loads(data)
            except ValueError:
                logger.warning("ignored a malformed live datagram")
                continue
            self.listener_loop.create_task(InMemoryChannelLayer.group_send(self, group, message))

    async def flush(self):
        await super().flush()
        self._stop_listening()
