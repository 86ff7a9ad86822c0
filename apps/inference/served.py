"""Which version each backend serves, and its recent weight swaps, where every process sees them: the shared
cache (Redis, or the embedded file cache), one entry per backend, read by the gateway to stamp per-token
policy versions on answers of servers that report none (vLLM; see workers/inference/swaps.py).

Writers: publication (apps/training/publication.py) records a swap when the backend pauses
(`served_swap_begin`, so that gateways know one is under way) and again when it resumed, with both moments
(`served_swap_end`), or takes the pending one back when the load failed (`served_swap_abandon`);
`backend_update` declares a version an operator set on the row (`served_version_declare`: a swap with no
pause, at that moment). Without an entry the gateway falls back on the row's `model_version`.

Tenancy: entries are keyed by backend id; callers pass backends (or ids) of the tenant they act for. Each
update is a read-modify-write of one entry under an exclusive lock (Redis lock, or a file lock on this
machine), and keeps the last KEEP_SWAPS swaps. Moments are wall-clock seconds since the epoch, so gateways
and publishers on different hosts need synchronised clocks (NTP) for the split of a stream to be exact.
"""

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache

from workers.inference.swaps import ServedVersions, WeightSwap, swaps_from_json, swaps_to_json

KEEP_SWAPS = 16
ENTRY_SECONDS = 30 * 24 * 3600
LOCK_SECONDS = 10


def served_key(backend_id: int) -> str:
    return f"inference.served.{int(backend_id)}"


@contextmanager
def _exclusive(backend_id: int):
    if isinstance(cache, RedisCache):
        client = cache._cache.get_client(write=True)
        with client.lock(cache.make_and_validate_key(served_key(backend_id) + ".lock"), timeout=LOCK_SECONDS):
            yield
        return
    path = Path(settings.VAR_DIR) / "served-versions.lock"
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _update(backend_id: int, change) -> None:
    with _exclusive(backend_id):
        served = swaps_from_json(cache.get(served_key(backend_id)) or [])
        swaps = change(list(served.swaps) if served else [])
        if swaps is None:
            return
        kept = ServedVersions(tuple(swaps[-KEEP_SWAPS:]))
        cache.set(served_key(backend_id), swaps_to_json(kept), timeout=ENTRY_SECONDS)


def _serving(swaps: list[WeightSwap], fallback: str) -> str:
    """What the backend serves by the record (the last resumed swap's version), else `fallback` (the row's)."""
    resumed = [swap for swap in swaps if swap.resumed_at is not None]
    return resumed[-1].to_version if resumed else fallback


def served_swap_begin(*, backend_id: int, from_version: str, to_version: str, paused_at: float) -> None:
    """The backend paused for a swap to `to_version` (not resumed yet). A swap still pending from an earlier
    publication (its publisher died before the resume) is dropped: this one supersedes it."""

    def change(swaps):
        resumed = [swap for swap in swaps if swap.resumed_at is not None]
        return [*resumed, WeightSwap(_serving(resumed, from_version), to_version, paused_at, None)]

    _update(backend_id, change)


def served_swap_end(
    *, backend_id: int, from_version: str, to_version: str, paused_at: float, resumed_at: float
) -> None:
    """The backend resumed on `to_version`: replaces the pending record of this swap (same pause moment), or
    adds it when none was made."""

    def change(swaps):
        kept = [swap for swap in swaps if swap.resumed_at is not None]
        return [*kept, WeightSwap(_serving(kept, from_version), to_version, paused_at, resumed_at)]

    _update(backend_id, change)


def served_swap_abandon(*, backend_id: int, paused_at: float) -> None:
    """The swap paused at `paused_at` failed: the backend resumed on its old weights."""

    def change(swaps):
        kept = [swap for swap in swaps if not (swap.resumed_at is None and swap.paused_at == paused_at)]
        return kept if len(kept) != len(swaps) else None

    _update(backend_id, change)


def served_version_declare(*, backend_id: int, from_version: str, to_version: str) -> None:
    """An operator says the backend serves `to_version` from now on (no pause seen). Nothing is recorded
    when the entry already names it (publication stamps the row after recording its swap)."""
    now = time.time()

    def change(swaps):
        current = _serving(swaps, from_version)
        if current == to_version:
            return None
        return [*swaps, WeightSwap(current, to_version, now, now)]

    _update(backend_id, change)


def served_versions_read(*, backend_ids) -> dict[int, ServedVersions]:
    """The entries of these backends (blocking cache I/O: the gateway calls it off its event loop)."""
    ids = [int(backend_id) for backend_id in backend_ids]
    if not ids:
        return {}
    found = cache.get_many([served_key(backend_id) for backend_id in ids])
    entries = {}
    for backend_id in ids:
        served = swaps_from_json(found.get(served_key(backend_id)) or [])
        if served is not None:
            entries[backend_id] = served
    return entries


def served_forget(*, backend_id: int) -> None:
    """The backend was removed: its entry goes too."""
    cache.delete(served_key(backend_id))
