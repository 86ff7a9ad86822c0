"""Starts real Celery worker processes for tests: same settings, same broker, the test database."""

import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _environment(extra: dict | None = None) -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "areal_web.settings.test",
        "AREAL_USE_TEST_DATABASE": "true",
        **(extra or {}),
    }


@contextlib.contextmanager
def _process(arguments: list[str], *, log_path: Path, env: dict):
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "areal_web", *arguments],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _worker_arguments(queues: str, name: str) -> list[str]:
    return [
        "worker",
        "-Q",
        queues,
        "--pool",
        "solo",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
        "--loglevel",
        "INFO",
    ]


@contextlib.contextmanager
def celery_worker(*, queue: str | None = None, log_path: Path):
    """Yields (process, queue). The worker consumes only `queue` (unique per test by default), so it
    never takes work meant for another worker; it is stopped (then killed) on exit."""
    queue = queue or f"test-{uuid.uuid4().hex[:10]}"
    with _process(_worker_arguments(queue, queue), log_path=log_path, env=_environment()) as process:
        yield process, queue


def worker_ready(log_path: Path, *, timeout: float = 120.0) -> None:
    """Waits until the worker logs that it consumes ("<name> ready."): on a loaded machine its start takes
    seconds, and a test that times what happens after a send must not count that start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if " ready." in log_path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"the worker did not start within {timeout:.0f} s:\n{log_path.read_text()[-4000:]}")


@contextlib.contextmanager
def celery_stack(*, log_dir: Path, env: dict | None = None):
    """The workers and the beat scheduler as an installation runs them, on the real queue names
    (areal_web/queues.py): one worker for the default, ingest and eval queues, one for the train queue (a long
    online run must not hold the others up), and beat sending the periodic tasks. `env` reaches all three (the
    gateway's URL, beat's periods). The queues are purged first: messages earlier tests of this session sent to
    them with no worker listening must not reach these workers. Yields the three processes."""
    from areal_web.celery import app
    from areal_web.queues import Queue

    with app.connection_for_write() as connection:
        for queue in Queue:
            connection.default_channel.queue_purge(queue.value)
    environment = _environment(env)
    others = ",".join(queue.value for queue in Queue if queue is not Queue.TRAIN)
    with (
        _process(
            _worker_arguments(others, "stack"), log_path=log_dir / "worker.log", env=environment
        ) as worker,
        _process(
            _worker_arguments(Queue.TRAIN.value, "stack-train"),
            log_path=log_dir / "train-worker.log",
            env=environment,
        ) as trainer,
        _process(
            ["beat", "--loglevel", "INFO", "--schedule", str(log_dir / "beat-schedule")],
            log_path=log_dir / "beat.log",
            env=environment,
        ) as beat,
    ):
        yield worker, trainer, beat
