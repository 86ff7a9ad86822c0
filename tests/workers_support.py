"""Starts real Celery worker processes for tests: same settings, same broker, the test database."""

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def celery_worker(*, queue: str | None = None, log_path: Path):
    """Yields (process, queue). The worker consumes only `queue` (unique per test by default), so it
    never takes work meant for another worker; it is stopped (then killed) on exit."""
    queue = queue or f"test-{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "areal_web.settings.test",
        "AREAL_USE_TEST_DATABASE": "true",
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "areal_web",
        "worker",
        "-Q",
        queue,
        "--pool",
        "solo",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{queue}@%h",
        "--loglevel",
        "INFO",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield process, queue
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
