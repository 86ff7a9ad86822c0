import asyncio
import time

from apps.trajectories.models import Step, Trajectory
from workers.atdp.tokens import unpack_floats, unpack_ids, unpack_versions
from workers.pii import Sanitizer


def drain(gateway) -> None:
    """Flushes the gateway's journal into the database (the flusher does it within ~50 ms anyway)."""
    loop = gateway._flusher.get_loop()
    asyncio.run_coroutine_threadsafe(gateway.journal.flush(), loop).result(timeout=30)


def as_recorded(text: str) -> str:
    """The text a step stores for a model's output: a random model may write something shaped like a phone
    number, which the default policy redacts."""
    return Sanitizer().scan_text(text).text


def step_tokens(step: Step) -> dict:
    return {
        "prompt_ids": unpack_ids(step.prompt_ids),
        "completion_ids": unpack_ids(step.completion_ids),
        "completion_logprobs": unpack_floats(step.completion_logprobs),
        "completion_versions": unpack_versions(step.completion_versions),
    }


def only_trajectory(tenant) -> Trajectory:
    trajectories = list(Trajectory.objects.filter(tenant=tenant))
    assert len(trajectories) == 1, trajectories
    return trajectories[0]


def wait_until_swap_seen(gateway, backend_id: int, version: str, *, timeout: float = 10) -> None:
    """The gateway process has read the weight swap of this backend to `version` (apps/gateway/versions.py: it
    reads the swaps every AREAL_GATEWAY_SWAP_REFRESH_MS)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = gateway.served_versions.entries.get(backend_id)
        if entry is not None and entry.version_at(time.time()) == version:
            return
        time.sleep(0.01)
    raise AssertionError(f"the gateway did not see backend {backend_id}'s swap to version {version}")
