"""The journal's ingestion in a process of its own (the recorder), so that the web process's interpreter serves
requests only: issue 30's profile found the flusher's `steps_ingest` sharing it (about a third of the web
process's CPU per request, and the event loop waiting for the interpreter behind it).

Each web process starts one recorder (`AREAL_GATEWAY_RECORDER=process`, the default outside tests):
`python -m apps.gateway.recorder`, its child, with Django set up on the web process's settings module and
databases. The web process still appends every step to its journal before the answer, and still decides
every group commit (journal.py: fdatasync, then the batch, then the committed marker): it hands the recorder
only the journal's path and the batch's byte range, one JSON line on the recorder's stdin. The recorder reads
those lines back as recovery does (`journal._parse`: a line that is not a whole record is set aside), stores
them with `steps_ingest` (a refused record set aside, the others stored) and answers one JSON line: how many
steps were new and the step ids it read. The web process keeps the batch in memory until then: a record the
range did not give back, or a batch the recorder could not take (it died, it could not start), is stored in
the web process as before, so no step depends on the recorder being alive. A recorder killed in the middle
of a batch leaves its transaction uncommitted and the batch is stored again (steps_ingest is idempotent on
step ids). The recorder ends when its stdin closes: when the web process closes it, or dies.
"""

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)
PROJECT_ROOT = str(
    Path(__file__).resolve().parents[2]
)  # where `apps` is, whatever the web process's directory


class RecorderFailed(Exception):
    """The recorder could not store a batch (the database refused the transaction, or is unreachable): the
    flusher keeps the batch and tries again, as it does when its own write fails."""


def _send(process: subprocess.Popen, message: dict) -> None:
    if process.stdin is None:
        raise ValueError("the recorder has no stdin")
    process.stdin.write(json.dumps(message, default=str).encode() + b"\n")
    process.stdin.flush()


class Recorder:
    """This web process's recorder process. `ingest` blocks: call it on the journal flusher's thread."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one batch at a time on the pipe

    def _started(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(  # noqa: S603 (this interpreter, this module, no shell)
                [sys.executable, "-m", "apps.gateway.recorder"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={
                    **os.environ,
                    "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
                    "PYTHONPATH": os.pathsep.join(filter(None, [PROJECT_ROOT, os.environ.get("PYTHONPATH")])),
                },
            )
            # A test run renames its database after reading the settings: the recorder takes them as they are now.
            _send(self._process, {"databases": settings.DATABASES})
        return self._process

    def start(self) -> None:
        """Starts the process now (its Django set-up takes a second or two) rather than at the first batch."""
        with self._lock:
            try:
                self._started()
            except OSError:
                logger.exception("could not start the journal's recorder; the web process stores its batches")

    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def ingest(self, path: str, start: int, end: int, rejected_path: str) -> tuple[int, list[str]] | None:
        """The records of `path` between bytes `start` and `end` stored by the recorder: (steps new, step ids
        read); None when the recorder could not take the batch (it is gone or cannot start: the next batch
        starts another), for the caller to store it itself. Raises RecorderFailed when the batch's transaction
        failed there."""
        with self._lock:
            try:
                process = self._started()
                _send(process, {"path": path, "start": start, "end": end, "rejected": rejected_path})
                answer = process.stdout.readline() if process.stdout is not None else b""
            except (OSError, ValueError) as error:
                answer, reason = b"", str(error)
            else:
                reason = f"exit status {process.poll()}"
            if not answer:
                logger.error(
                    "the journal's recorder is gone (%s); storing this batch in the web process", reason
                )
                self._stop()
                return None
        reply = json.loads(answer)
        if "error" in reply:
            raise RecorderFailed(reply["error"])
        return reply["written"], reply["read"]

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Ends the recorder once it has answered its last batch (stdin closed: it exits)."""
        with self._lock:
            self._stop()


# the recorder process ----------------------------------------------------------------------------------


def journal_range_ingest(path: str, start: int, end: int, rejected_path: str) -> tuple[int, list[str]]:
    """In the recorder: the records of `path` between byte `start` and byte `end` stored (steps_ingest; a
    refused record, and a line that is not a whole record, set aside in `rejected_path`). Returns how many
    steps were new and the step ids read."""
    # Imported here: the recorder runs this module as its main program before Django is set up (`_serve`),
    # and the journal's imports reach modules that define models.
    from apps.gateway.journal import _ingest_isolating, _parse, _set_aside

    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    records, position = [], start
    for line in data.splitlines(keepends=True):
        record, problem = _parse(line)
        if record is None:
            logger.error("%s: the line at byte %d cannot be stored (%s); set aside", path, position, problem)
            _set_aside(
                Path(rejected_path),
                {"error": problem, "journal": Path(path).name, "offset": position, "bytes": len(line)},
            )
        else:
            records.append(record)
        position += len(line)
    return _ingest_isolating(records, Path(rejected_path)), [record["step_id"] for record in records]


def _serve() -> None:
    """The recorder's loop: one batch a line on stdin, one answer a line, until stdin closes."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    first = sys.stdin.buffer.readline()
    if not first:
        return
    from django.conf import settings as recorder_settings

    recorder_settings.DATABASES = json.loads(first)["databases"]
    import django

    django.setup()
    from django.db import DatabaseError, connections

    for line in sys.stdin.buffer:
        batch = json.loads(line)
        try:
            written, read = journal_range_ingest(
                batch["path"], batch["start"], batch["end"], batch["rejected"]
            )
            reply: dict = {"written": written, "read": read}
        except Exception as error:  # noqa: BLE001  (the web process keeps the batch and tries again)
            logger.exception("the recorder could not store a batch of %s", batch["path"])
            if isinstance(error, DatabaseError):
                connections.close_all()  # the next batch reconnects
            reply = {"error": f"{type(error).__name__}: {error}"[:500]}
        answers.write(json.dumps(reply).encode() + b"\n")
        answers.flush()


if __name__ == "__main__":
    _serve()
