"""A shortened `make demo` end to end: real web, Celery workers, beat and two embedded inference servers; a
tiny warm-up, a short online run; DEMO_EXIT=1. Checks the behaviour (the table, held-out success measured for
the base and a candidate, trajectories trained on, a release of a candidate through apps.releases that ends
promoted, rolled back or aborted, the annotator's labels through the annotation API), not the 30-point goal
(bench/demo measures that)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from areal_web.processes import port_is_free

pytestmark = pytest.mark.worker

ROOT = Path(__file__).resolve().parents[2]
APPROVE_AFTER_SECONDS = 3.0


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _free_port_pair() -> int:
    """A free port whose next port is free too: the demo serves its canary slot on the inference port + 1."""
    while True:
        port = _free_port()
        if port < 65535 and port_is_free("127.0.0.1", port + 1):
            return port


class Operator:
    """An operator in another window: signs in to the running demo's console as the admin and approves every
    release that awaits approval, through the same API the console's Approve button calls."""

    def __init__(self, tmp_path, port: int):
        import threading

        self.credentials = tmp_path / "demo" / "first-start-credentials.txt"
        self.url = f"http://127.0.0.1:{port}"
        self.approved: list[int] = []
        self.seen: dict[int, float] = {}  # release id → when it was first seen waiting
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)

    def _work(self) -> None:
        import httpx

        from workers.envs.annotator import console_sign_in

        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self.stop.wait(1.0):
                try:
                    if "sessionid" not in http.cookies:
                        lines = dict(
                            line.split(": ", 1) for line in self.credentials.read_text().splitlines()
                        )
                        console_sign_in(
                            http, console_url=self.url, username=lines["username"], password=lines["password"]
                        )
                    waiting = http.get("/api/v1/releases/", params={"status": "awaiting_approval"}).json()
                    for release in waiting["results"]:
                        # as a person would, a few seconds after it began to wait: the demo's one-second loop
                        # has then printed that it waits (approving at once raced that line)
                        seen = self.seen.setdefault(release["id"], time.monotonic())
                        if time.monotonic() - seen < APPROVE_AFTER_SECONDS:
                            continue
                        if http.post(f"/api/v1/releases/{release['id']}/approve/").status_code == 200:
                            self.approved.append(release["id"])
                except (OSError, httpx.HTTPError, KeyError, ValueError, PermissionError):
                    continue  # the demo is not up yet, or going down


def _demo(tmp_path, **overrides) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "DEMO_VAR_DIR": str(tmp_path / "demo"),
        "DEMO_EXIT": "1",
        "DEMO_SFT_STEPS": "3",
        "DEMO_SKILL_STEPS": "3",
        "DEMO_BUDGET_SECONDS": "120",
        "DEMO_HELDOUT": "8",
        "DEMO_BATCH": "4",
        "DEMO_EVAL_EVERY": "1",
        "DEMO_USERS": "2",
        "DEMO_SUMMARY": str(tmp_path / "summary.json"),
        "DEMO_ANNOTATOR_SHARE": "1",
        "PORT": str(_free_port()),
        "AREAL_INFERENCE_PORT": str(_free_port_pair()),
        **overrides,
    }
    # `make demo` is the embedded default by definition (no PostgreSQL, no Redis): under CI=true the suite's
    # service URLs are set in this process's environment, and the demo must not inherit them. Nor the metrics
    # folder the settings set for this worker: the demo's counters would add to the next test's tenant of
    # the same id there.
    for name in (
        "AREAL_VAR_DIR",
        "PROMETHEUS_MULTIPROC_DIR",
        "DJANGO_SETTINGS_MODULE",
        "DATABASE_URL",
        "REDIS_URL",
        "AREAL_USE_TEST_DATABASE",
    ):
        environment.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "demo"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_shortened_demo_measures_base_and_candidate(tmp_path):
    port = _free_port()
    operator = Operator(tmp_path, port)
    operator.thread.start()
    try:
        finished = _demo(tmp_path, PORT=str(port), DEMO_APPROVE="manual")
    finally:
        operator.stop.set()
        operator.thread.join(timeout=15)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    output = finished.stdout
    assert "console: http://127.0.0.1:" in output
    assert "password" in output
    assert "version  role         held-out success" in output
    assert "wall time" in output
    summary = json.loads((tmp_path / "summary.json").read_text())
    measured = {point["version"] for point in summary["curve"]}
    # the base and at least one candidate of the online run
    assert 0 in measured, summary
    assert len(measured) >= 2, summary
    assert summary["rows"][0]["role"] == "base"
    assert summary["trajectories"] > 0
    assert summary["tokens"] > 0
    assert summary["steps"] >= 1
    released = [row for row in summary["rows"] if "release" in row]
    assert released, summary
    assert {row["role"] for row in released} <= {"promoted", "rolled back", "aborted"}, summary
    assert "canary at 50% of new sessions" in output
    # DEMO_APPROVE=manual: the demo waited for the operator, who approved in the console's API.
    promoted = [row for row in released if row["role"] == "promoted"]
    assert "waits for an operator: approve it at" in output, output[-3000:]
    assert operator.approved, output[-3000:]
    assert promoted, summary
    assert {row["approved_by"] for row in promoted} == {"admin"}, summary
    assert summary["annotator_labels"] >= 1, output[-3000:]
    assert (tmp_path / "demo" / "logs" / "web.log").exists()

    # A second run resets var/demo (a fresh database: the model is `weather` again) and reuses the base.
    again = _demo(tmp_path, DEMO_BUDGET_SECONDS="5")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resetting" in again.stdout
    assert "reusing the base trained by an earlier run" in again.stdout
    assert json.loads((tmp_path / "summary.json").read_text())["model"] == "weather"


def test_demo_refuses_a_busy_port(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        finished = _demo(tmp_path, PORT=str(port))
    assert finished.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use" in finished.stderr
    assert not (tmp_path / "demo").exists()
