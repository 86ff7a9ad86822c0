"""Write-ahead journal for recorded steps.

The gateway appends each step to this process's journal file (one write(2) of one JSON line, O_APPEND)
before it releases the response, so a step whose response reached the agent survives a SIGKILL of the
web process: the bytes are in the kernel. A background flusher batches pending steps into the database
(group commit) and records how far the file is committed; on start, journals left by dead processes
(their flock is free) are replayed from their committed offset. Replays are idempotent (step ids).
"""

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import uuid
from pathlib import Path

from django.conf import settings
from django.db import DataError, IntegrityError

from apps.gateway.db import flusher_database
from apps.metrics.traffic import gateway_steps_recorded

logger = logging.getLogger(__name__)

FLUSH_BATCH = 500
ROTATE_BYTES = 32 * 1024 * 1024


def _ingest(records: list[dict]) -> int:
    from apps.trajectories.services import steps_ingest

    return steps_ingest(records=records)


def _ingest_isolating(records: list[dict], rejected_path: Path) -> int:
    """Stores `records` in one transaction (steps_ingest is atomic). If the database refuses one, which would
    otherwise block every later step, stores them one by one and sets the refused ones aside."""
    try:
        return _ingest(records)
    except (DataError, IntegrityError):
        logger.exception("the database refused a batch of %d journalled steps; isolating", len(records))
        return _ingest_each(records, rejected_path)


def _ingest_each(records: list[dict], rejected_path: Path) -> int:
    """Stores records one at a time; those the database refuses are appended to `rejected_path` (one JSON
    line each, with the error) and logged."""
    written = 0
    for record in records:
        try:
            written += _ingest([record])
        except (DataError, IntegrityError) as error:
            logger.error("step %s refused by the database (%s); kept in %s", record.get("step_id"), error,
                         rejected_path.name)
            with open(rejected_path, "a") as rejected:
                rejected.write(json.dumps({"error": str(error), "record": record}, default=str) + "\n")
    return written


class Journal:
    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.pending: list[tuple[dict, int]] = []  # (record, end offset in the file)
        self.wakeup = asyncio.Event()
        self.flushing = asyncio.Lock()  # a flush returns only once everything journalled before it is in the database
        self.rejected_path = directory / "rejected.jsonl"
        self._open_new_file()

    def _open_new_file(self) -> None:
        self.path = self.directory / f"journal-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.offset = 0
        self.committed = 0

    def append(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n"
        os.write(self.fd, line)
        self.offset += len(line)
        self.pending.append((record, self.offset))
        if len(self.pending) >= FLUSH_BATCH:
            self.wakeup.set()

    def _mark_committed(self, offset: int) -> None:
        self.committed = offset
        (self.path.with_suffix(".committed")).write_text(str(offset))
        if self.offset == self.committed and self.offset >= ROTATE_BYTES:
            old_fd, old_path = self.fd, self.path
            self._open_new_file()
            os.close(old_fd)
            old_path.unlink(missing_ok=True)
            old_path.with_suffix(".committed").unlink(missing_ok=True)

    async def flush(self) -> int:
        async with self.flushing:
            return await self._flush_pending()

    async def _flush_pending(self) -> int:
        written = 0
        while self.pending:
            batch, self.pending = self.pending[:FLUSH_BATCH], self.pending[FLUSH_BATCH:]
            try:
                written += await flusher_database(_ingest_isolating)([record for record, _ in batch],
                                                                     self.rejected_path)
            except Exception:
                logger.exception("flushing %d journalled steps failed; will retry", len(batch))
                self.pending = batch + self.pending
                raise
            self._mark_committed(batch[-1][1])
            gateway_steps_recorded([record for record, _ in batch])
        return written

    async def run_flusher(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), settings.AREAL_JOURNAL_FLUSH_MS / 1000)
            self.wakeup.clear()
            try:
                await self.flush()
            except Exception:
                await asyncio.sleep(1.0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _replay(path: Path, start: int) -> int:
    inserted = 0
    rejected_path = path.parent / "rejected.jsonl"
    with open(path, "rb") as handle:
        handle.seek(start)
        batch = []
        for line in handle:
            if not line.endswith(b"\n"):
                break  # a torn last write: its response was never released
            batch.append(json.loads(line))
            if len(batch) >= FLUSH_BATCH:
                inserted += _ingest_isolating(batch, rejected_path)
                batch = []
        inserted += _ingest_isolating(batch, rejected_path)
    return inserted


def journal_recover(directory: Path) -> int:
    """Replays journals whose writer is gone (lock free) from their committed offset, then deletes them.
    Synchronous: call it before serving (or from a thread). Returns the number of steps inserted."""
    inserted = 0
    if not directory.exists():
        return 0
    for path in sorted(directory.glob("journal-*.jsonl")):
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process owns it
            marker = path.with_suffix(".committed")
            try:
                inserted += _replay(path, int(marker.read_text() or 0) if marker.exists() else 0)
            except Exception:
                # Never block start-up on one bad journal: keep it for an operator, out of the way.
                logger.exception("could not replay %s; moved aside as .failed for inspection", path.name)
                path.rename(path.with_suffix(".failed"))
            else:
                path.unlink()
            marker.unlink(missing_ok=True)
        finally:
            os.close(fd)
    if inserted:
        logger.warning("recovered %d journalled steps into the database", inserted)
    return inserted
