"""The training worker's process set-up (apps.loop.training_runs.training_process_prepare): torch's threads and
the niceness of every thread of the process. Run in a child process, since a niceness cannot be lowered
again without privilege."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, os, threading, time
import django
django.setup()
import torch
torch.set_num_threads(2)
torch.ones(64, 64) @ torch.ones(64, 64)  # torch's pool exists before the set-up, as in a reused worker
started = threading.Event()
threading.Thread(target=lambda: (started.set(), time.sleep(5)), daemon=True).start()
started.wait()
from apps.loop.training_runs import training_process_prepare
training_process_prepare()
tasks = [int(name) for name in os.listdir("/proc/self/task")]
print(json.dumps({
    "niceness": sorted({os.getpriority(os.PRIO_PROCESS, tid) for tid in tasks}),
    "threads": len(tasks),
    "torch_threads": torch.get_num_threads(),
}))
"""


def _prepare_in_child(**environment) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "areal_web.settings.test", **environment},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="per-thread niceness is read from /proc")
def test_every_thread_of_the_training_process_takes_the_niceness():
    # 19: the most a niceness can be, so setting it never lowers one (which would need privilege)
    child = _prepare_in_child(AREAL_TRAINING_NICENESS="19", AREAL_TRAINING_THREADS="1")
    assert child["threads"] >= 2  # the main thread and the one started before the set-up
    assert child["niceness"] == [19]
    assert child["torch_threads"] == 1


def test_niceness_zero_leaves_the_process_as_it_was():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    child = _prepare_in_child(AREAL_TRAINING_NICENESS="0", AREAL_TRAINING_THREADS="2")
    assert child["niceness"] == [before]
    assert child["torch_threads"] == 2
