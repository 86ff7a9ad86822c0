"""Write-ahead journal for recorded steps.

The gateway appends each step to this process's journal file (one JSON line, O_APPEND, written whole:
short writes are continued, a write that fails halfway is taken back) before it releases the response,
so a step whose response reached the agent survives a SIGKILL of the web process: the bytes are in the
kernel. A background flusher batches pending steps into the database (group commit): each flush first
fdatasyncs the journal, so an answered step also survives a power loss once one flush interval
(`AREAL_JOURNAL_FLUSH_MS`) has passed, then records how far the file is committed in a marker replaced
atomically (temporary file, fsync, rename). On start, journals left by dead processes (their flock is
free) are replayed line by line from their committed offset: a torn or corrupt line is set aside on its
own and the good records around it are stored; an unreadable marker means "replay from the start".
Replays are idempotent (step ids). With a recorder (recorder.py, `AREAL_GATEWAY_RECORDER=process`) each batch
is stored by that process from the batch's byte range of the file, and by this one whenever it cannot be.

When the journal cannot take a record (disk full, I/O error) it is unavailable for `RETRY_SECONDS`, and
also while its disk has less than `MIN_FREE_BYTES` free: the gateway answers 503 with Retry-After before
forwarding (`check_writable`), or instead of an answer it could not journal (step_journal.py).

Records the database refuses, and lines recovery cannot read, go to `rejected.jsonl` in the journal's
directory: metadata only (ids, counts, timing, the error), never prompts or answers; created 0600, written
under a lock shared by the processes, rotated to `rejected.jsonl.1` past `AREAL_JOURNAL_REJECTED_MAX_BYTES`.
"""

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DataError, IntegrityError
from django.utils import timezone

from apps.gateway import wire_json
from apps.gateway.db import flusher_database
from apps.metrics.traffic import gateway_steps_recorded

if TYPE_CHECKING:
    from apps.gateway.recorder import Recorder

logger = logging.getLogger(__name__)

FLUSH_BATCH = 500
ROTATE_BYTES = 32 * 1024 * 1024
RETRY_SECONDS = 10  # how long the journal stays unavailable after a failed write (the 503's Retry-After)
MIN_FREE_BYTES = 32 * 1024 * 1024  # below this much free disk, requests are refused before forwarding
FREE_CHECK_SECONDS = 1.0  # how long a "there is room" answer of statvfs is trusted
REJECTED_NAME = "rejected.jsonl"
# What a rejected record keeps: who, when, what it cost, never what was said.
REJECTED_FIELDS = (
    "step_id",
    "tenant_id",
    "session_id",
    "api_key_prefix",
    "task_id",
    "group_id",
    "purpose",
    "consent",
    "agent_name",
    "agent_version",
    "created_at",
    "retention_until",
    "parent_step_id",
    "retry_of",
    "kind",
    "endpoint",
    "served_model",
    "model_version",
    "policy_version",
    "backend_name",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "ttft_ms",
    "cost_usd",
    "aborted",
)
# Errors a record's own content can cause in steps_ingest: the record is set aside, the others are stored.
# (A database that is down raises OperationalError/InterfaceError: those are retried, never set aside.)
RECORD_ERRORS = (DataError, IntegrityError, ValueError, TypeError, KeyError, AttributeError)


class JournalUnavailable(Exception):
    """The journal cannot take records right now; retry after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: int = RETRY_SECONDS):
        super().__init__(message)
        self.retry_after = max(1, retry_after)


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer can still use on the file system holding `directory`."""
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def _write_all(fd: int, data: bytes) -> None:
    """write(2) until every byte is written (a short write is continued, never glued to the next record)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write(2) wrote nothing")
        view = view[written:]


def _marker_write(marker: Path, offset: int) -> bool:
    """Replaces the committed marker atomically: a crash leaves the old marker or the new one, never a torn one."""
    temporary = marker.with_name(marker.name + ".tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, str(offset).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, marker)
    except OSError as error:
        # The steps are in the database; a marker that lags only makes a replay start earlier (idempotent).
        logger.warning("could not advance %s to %d (%s)", marker.name, offset, error)
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        return False
    return True


def _set_aside(rejected_path: Path, entry: dict) -> None:
    """Appends one metadata entry to `rejected_path` (0600; one whole write under a lock the processes share),
    rotating the file to `<name>.1` (replacing the previous one) when it would pass the size cap. Never raises:
    the entry is also logged."""
    entry = {"at": timezone.now().isoformat(), **entry}
    line = json.dumps(entry, separators=(",", ":"), default=str).encode() + b"\n"
    cap = settings.AREAL_JOURNAL_REJECTED_MAX_BYTES
    try:
        lock_fd = os.open(rejected_path.with_suffix(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:
                size = rejected_path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(line) > cap:
                os.replace(rejected_path, rejected_path.with_name(rejected_path.name + ".1"))
            fd = os.open(rejected_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.fchmod(fd, 0o600)  # a file from an older version may carry the umask's mode
                _write_all(fd, line)
            finally:
                os.close(fd)
        finally:
            os.close(lock_fd)
    except OSError:
        logger.exception("could not write to %s: %s", rejected_path.name, line[:500])


def _rejected_entry(record: dict, error: Exception) -> dict:
    kept = {name: record[name] for name in REJECTED_FIELDS if name in record}
    for name, value in kept.items():
        if isinstance(value, str):
            kept[name] = value[:200]
    return {"error": f"{type(error).__name__}: {error}"[:500], "record": kept}


def _ingest(records: list[dict]) -> int:
    from apps.trajectories.services import steps_ingest

    return steps_ingest(records=records)


def _ingest_isolating(records: list[dict], rejected_path: Path) -> int:
    """Stores `records` in one transaction (steps_ingest is atomic). If one of them is refused, which would
    otherwise block every later step, stores them one by one and sets the refused ones aside."""
    try:
        return _ingest(records)
    except RECORD_ERRORS:
        logger.exception("the database refused a batch of %d journalled steps; isolating", len(records))
        return _ingest_each(records, rejected_path)


def _ingest_each(records: list[dict], rejected_path: Path) -> int:
    """Stores records one at a time; those refused are set aside in `rejected_path` (metadata and the
    error, one JSON line each) and logged."""
    written = 0
    for record in records:
        try:
            written += _ingest([record])
        except RECORD_ERRORS as error:
            logger.error(
                "step %s refused by the database (%s); set aside in %s",
                record.get("step_id"),
                error,
                rejected_path.name,
            )
            _set_aside(rejected_path, _rejected_entry(record, error))
    return written


class Journal:
    def __init__(self, directory: Path, *, recorder: "Recorder | None" = None):
        self.directory = directory
        # Stores the batches in a process of its own (recorder.py); None: the flusher's thread stores them.
        self.recorder = recorder
        directory.mkdir(parents=True, exist_ok=True)
        # (record, end offset in the file); a record the file could not take carries the offset it reached.
        self.pending: list[tuple[dict, int]] = []
        self.wakeup = asyncio.Event()
        self.flushing = (
            asyncio.Lock()
        )  # a flush returns only once everything journalled before it is in the database
        self.rejected_path = directory / REJECTED_NAME
        self.unavailable_until = (
            0.0  # time.monotonic() until which the journal refuses (after a failed write)
        )
        self._room_until = 0.0  # time.monotonic() until which the last "enough free disk" answer holds
        self._dirty = False  # a failed write may have left a fragment that could not be taken back
        self._lock = threading.Lock()  # one record at a time into the file, whatever thread appends
        self._unjournalled: set[str] = set()  # step ids of pending records the file could not take
        self._open_new_file()

    def _open_new_file(self) -> None:
        self.path = self.directory / f"journal-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(
            self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB
        )  # one writer per file; recovery skips locked files
        self.offset = 0
        self.committed = 0
        self.handed = 0  # the file's bytes up to here are in a batch taken by a flush
        self._dirty = False

    # taking records ------------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raises JournalUnavailable when a record would not be taken now: a write failed within the last
        RETRY_SECONDS, or the disk has less than MIN_FREE_BYTES free. Cheap: statvfs at most once a second
        while there is room."""
        now = time.monotonic()
        if now < self.unavailable_until:
            raise JournalUnavailable(
                "the journal failed a write", retry_after=math.ceil(self.unavailable_until - now)
            )
        if now < self._room_until:
            return
        try:
            room = free_bytes(self.directory)
        except OSError:
            return  # unknown: let the write itself tell
        if room < MIN_FREE_BYTES:
            raise JournalUnavailable(f"the journal's disk has {room} bytes free")
        self._room_until = now + FREE_CHECK_SECONDS

    def append(self, record: dict) -> None:
        """Writes the record as one whole line; raises JournalUnavailable (the file unchanged) if it cannot."""
        line = wire_json.dumps(record) + b"\n"
        with self._lock:
            try:
                if self._dirty:
                    self._write_after_fragment(line)
                else:
                    _write_all(self.fd, line)
                    self.offset += len(line)
            except OSError as error:
                self._take_back()
                self.unavailable_until = time.monotonic() + RETRY_SECONDS
                logger.error(
                    "the journal %s could not take step %s (%s); refusing steps for %d s",
                    self.path.name,
                    record.get("step_id"),
                    error,
                    RETRY_SECONDS,
                )
                raise JournalUnavailable(f"the journal could not take the step: {error}") from error
            self.pending.append((record, self.offset))
        if len(self.pending) >= FLUSH_BATCH:
            self.wakeup.set()

    def append_unjournalled(self, record: dict) -> None:
        """Queues a record the file could not take for the next group commit (memory only: lost if this
        process dies before it). For a step whose answer is already out (a stream)."""
        with self._lock:
            self.pending.append((record, self.offset))
            self._unjournalled.add(record.get("step_id"))
        logger.warning("step %s is held in memory only until the next group commit", record.get("step_id"))
        self.wakeup.set()

    def _take_back(self) -> None:
        """After a failed write: cuts the file back to the end of its last whole record (self.offset)."""
        try:
            os.ftruncate(self.fd, self.offset)
            self._dirty = False
        except OSError:
            self._dirty = True

    def _write_after_fragment(self, line: bytes) -> None:
        """An earlier failed write left a fragment that could not be cut off: cut it now, or else close it with
        a newline, so that it is a line of its own (recovery sets it aside) and this record starts a line."""
        self._take_back()
        end = self.offset if not self._dirty else os.fstat(self.fd).st_size
        prefix = b"\n" if end != self.offset else b""
        _write_all(self.fd, prefix + line)
        self._dirty = False
        self.offset = end + len(prefix) + len(line)

    # group commit --------------------------------------------------------------------------------------
    def _sync(self) -> None:
        """fdatasync: every step journalled so far survives a power loss, not only a killed process."""
        try:
            os.fdatasync(self.fd)
        except OSError as error:
            self.unavailable_until = time.monotonic() + RETRY_SECONDS
            logger.error(
                "fdatasync of the journal %s failed (%s); refusing steps for %d s",
                self.path.name,
                error,
                RETRY_SECONDS,
            )

    def _commit(self, records: list[dict], start: int, offset: int, journalled: bool) -> int:
        """On the flusher's thread: sync the journal, store the batch (the file's bytes from `start` to `offset`,
        which hold its records when `journalled`), advance the committed marker."""
        self._sync()
        written = self._store(records, start, offset) if journalled else None
        if written is None:
            written = _ingest_isolating(records, self.rejected_path)
        if _marker_write(self.path.with_suffix(".committed"), offset):
            self.committed = offset
        return written

    def _store(self, records: list[dict], start: int, offset: int) -> int | None:
        """The batch stored by the recorder process, from the file; None when there is none or it could not
        take the batch. A record it did not read back is stored here (never expected: a safety net)."""
        if self.recorder is None:
            return None
        outcome = self.recorder.ingest(str(self.path), start, offset, str(self.rejected_path))
        if outcome is None:
            return None
        written, read = outcome[0], set(outcome[1])
        unread = [record for record in records if record["step_id"] not in read]
        if unread:
            logger.error(
                "the recorder read %d of %d steps back from %s; storing the others here",
                len(records) - len(unread),
                len(records),
                self.path.name,
            )
            written += _ingest_isolating(unread, self.rejected_path)
        return written

    def _rotate_if_done(self) -> None:
        with self._lock:
            if self.pending or self.offset != self.committed or self.offset < ROTATE_BYTES:
                return
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
            with self._lock:
                batch, self.pending = self.pending[:FLUSH_BATCH], self.pending[FLUSH_BATCH:]
                start, self.handed = self.handed, batch[-1][1]
                records = [record for record, _ in batch]
                journalled = not self._unjournalled or not any(
                    record.get("step_id") in self._unjournalled for record in records
                )
            try:
                written += await flusher_database(self._commit)(records, start, batch[-1][1], journalled)
            except Exception:
                logger.exception("flushing %d journalled steps failed; will retry", len(batch))
                with self._lock:
                    self.pending = batch + self.pending
                    self.handed = start
                raise
            if not journalled:
                with self._lock:
                    self._unjournalled.difference_update(record.get("step_id") for record in records)
            self._rotate_if_done()
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


# recovery ----------------------------------------------------------------------------------------------


def _committed_offset(handle, marker: Path) -> int:
    """Where replay starts: the marker's offset if it is a readable line boundary inside the file, else 0
    (replaying committed records again is harmless: step ids make it idempotent)."""
    try:
        raw = marker.read_bytes()
    except FileNotFoundError:
        return 0
    size = os.fstat(handle.fileno()).st_size
    try:
        offset = int(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        offset = -1
    if 0 <= offset <= size:
        if offset == 0:
            return 0
        handle.seek(offset - 1)
        if handle.read(1) == b"\n":
            return offset
    logger.warning(
        "the marker %s (%r) is not a record boundary of its journal; replaying it from the start",
        marker.name,
        raw[:40],
    )
    return 0


def _parse(line: bytes) -> tuple[dict | None, str]:
    """(record, "") or (None, why the line cannot be replayed)."""
    if not line.endswith(b"\n"):
        return None, "an incomplete last record (its answer was never released)"
    try:
        record = wire_json.loads(line)
    except (ValueError, RecursionError) as error:
        return None, f"not a JSON line: {type(error).__name__}"
    if not isinstance(record, dict) or not isinstance(record.get("step_id"), str):
        return None, "not a step record"
    return record, ""


def _replay(path: Path, marker: Path) -> int:
    inserted = 0
    rejected_path = path.parent / REJECTED_NAME
    with open(path, "rb") as handle:
        position = _committed_offset(handle, marker)
        handle.seek(position)
        batch = []
        for line in handle:
            start, position = position, position + len(line)
            record, problem = _parse(line)
            if record is None:
                logger.error(
                    "%s: the line at byte %d cannot be replayed (%s); set aside", path.name, start, problem
                )
                _set_aside(
                    rejected_path,
                    {"error": problem, "journal": path.name, "offset": start, "bytes": len(line)},
                )
                continue
            batch.append(record)
            if len(batch) >= FLUSH_BATCH:
                inserted += _ingest_isolating(batch, rejected_path)
                batch = []
                _marker_write(marker, position)  # a replay interrupted now resumes here
        inserted += _ingest_isolating(batch, rejected_path)
    return inserted


def journal_recover(directory: Path) -> int:
    """Replays journals whose writer is gone (lock free) from their committed offset, then deletes them.
    Synchronous: call it before serving (or from a thread). Returns the number of steps inserted. A journal
    that cannot be replayed now (the database is unreachable) stays for the next start; start-up goes on."""
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
                inserted += _replay(path, marker)
            except Exception:
                logger.exception("could not replay %s; it stays for the next start", path.name)
                continue
            path.unlink()
            marker.unlink(missing_ok=True)
            marker.with_name(marker.name + ".tmp").unlink(missing_ok=True)
        finally:
            os.close(fd)
    if inserted:
        logger.warning("recovered %d journalled steps into the database", inserted)
    return inserted
