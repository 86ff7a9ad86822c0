"""`python -m demo` as a benchmark runs it: in its own process group, stopped and then killed past its time,
so no web, worker or inference server outlives a run (bench/demo, bench/evolution)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_demo(environment: dict, *, timeout: float) -> tuple[int | None, str]:
    """`python -m demo` in its own process group; past `timeout` it is asked to stop (SIGTERM: it stops its
    stack), and the whole group is killed a minute later, so no web, worker or server outlives a scenario."""
    process = subprocess.Popen(
        [sys.executable, "-m", "demo"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        return None, f"timed out after {timeout:.0f} s\n{output or ''}"
    return process.returncode, output or ""
