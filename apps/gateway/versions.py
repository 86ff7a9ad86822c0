"""Per-token policy versions of answers that carry none (vLLM, other OpenAI-compatible servers).

The embedded server stamps each token with the version that sampled it (`token_policy_versions`); vLLM does
not. For those answers the step's `completion_versions` are derived from the version the routed backend
served, and from the weight swaps publication recorded for it (apps/inference/served.py), by the rules of
workers/inference/swaps.py: a stream's tokens get the version served when the gateway received them (old
before the swap's resume, new after); a whole answer that a swap's resume fell into gets the older version
for every token and a warning, since where the swap fell among its tokens is unknown. Without a swap record
the version is the backend row's `model_version` (else the version it reported at its last check). A version
that cannot be derived is -1, as before, but no longer silently: the step's `state.token_versions` carries a
warning, which the trajectory page shows and the metrics count (`areal_gateway_token_version_warnings_total`).

`ServedVersionsSnapshot` keeps, per process, the entries of the backends this process forwarded to in the
last ten minutes, read again every AREAL_GATEWAY_SWAP_REFRESH_MS off the event loop: no request reads the
cache, except the first one to a backend in a process and one that ends while the entry shows a swap paused
but not yet resumed (its resume moment is read then). A swap that both began and resumed since the last
refresh is not seen by a step that ends meanwhile: its tokens get the older version (conservative).
"""

import asyncio
import logging
import time

from django.conf import settings

from workers.inference.swaps import (
    ServedVersions,
    TokenVersions,
    answer_versions,
    stream_versions,
)

logger = logging.getLogger(__name__)
FORGET_AFTER_SECONDS = 600.0
UNKNOWN_VERSION = "unknown_version"
SWAP_SPLIT_UNKNOWN = "swap_split_unknown"


class ServedVersionsSnapshot:
    def __init__(self):
        self.entries: dict[int, ServedVersions] = {}
        self.used: dict[int, float] = {}  # backend id → when this process last needed it (monotonic)

    def clear(self) -> None:
        self.entries.clear()
        self.used.clear()

    async def get(self, backend_id: int, *, ended_at: float) -> ServedVersions | None:
        first_use = backend_id not in self.used
        self.used[backend_id] = time.monotonic()
        entry = self.entries.get(backend_id)
        if first_use or (entry is not None and entry.pending_since(ended_at)):
            await self.read([backend_id])
        return self.entries.get(backend_id)

    async def refresh(self) -> None:
        cutoff = time.monotonic() - FORGET_AFTER_SECONDS
        for backend_id in [key for key, used in self.used.items() if used < cutoff]:
            self.used.pop(backend_id, None)
            self.entries.pop(backend_id, None)
        if self.used:
            await self.read(list(self.used))

    async def read(self, backend_ids: list[int]) -> None:
        """Reads these entries from the shared cache on a thread; on a cache failure the old ones stay."""
        from apps.inference.served import served_versions_read

        try:
            found = await asyncio.to_thread(served_versions_read, backend_ids=backend_ids)
        except Exception:
            logger.warning("could not read the backends' served versions from the cache", exc_info=True)
            return
        for backend_id in backend_ids:
            if backend_id in found:
                self.entries[backend_id] = found[backend_id]
            else:
                self.entries.pop(backend_id, None)

    async def run_refresher(self) -> None:
        while True:
            await asyncio.sleep(settings.AREAL_GATEWAY_SWAP_REFRESH_MS / 1000)
            await self.refresh()


def _needs_derivation(draft) -> bool:
    """The answer has token ids but neither per-token versions nor a top-level `policy_version` (which the
    embedded server always sends)."""
    parsed = draft.parsed
    if parsed is None or not parsed.choices or draft.backend is None:
        return False
    first = parsed.choices[0]
    return (
        first.completion_token_ids is not None
        and first.policy_versions is None
        and parsed.policy_version is None
    )


def _derive(draft, served: ServedVersions | None) -> TokenVersions:
    backend = draft.backend
    fallback = getattr(backend, "model_version", "") or getattr(backend, "reported_version", "") or ""
    count = len(draft.parsed.choices[0].completion_token_ids)
    if draft.chunks:
        return stream_versions(
            served,
            fallback=fallback,
            arrivals=draft.token_arrivals,
            count=count,
            started_at=draft.forwarded_at,
        )
    return answer_versions(
        served, fallback=fallback, count=count, started_at=draft.forwarded_at, ended_at=draft.answered_at
    )


async def derive_token_versions(draft, snapshot: ServedVersionsSnapshot) -> None:
    """Sets `draft.token_versions` when the answer carries no versions (`_needs_derivation`), from this
    process's snapshot. A no-op otherwise."""
    if _needs_derivation(draft):
        served = await snapshot.get(draft.backend.pk, ended_at=draft.answered_at or time.time())
        draft.token_versions = _derive(draft, served)


def derive_token_versions_now(draft) -> None:
    """The same, reading the backend's entry from the shared cache at once: for callers off the event loop
    (replay runs in a worker)."""
    from apps.inference.served import served_versions_read

    if _needs_derivation(draft):
        draft.token_versions = _derive(
            draft, served_versions_read(backend_ids=[draft.backend.pk]).get(draft.backend.pk)
        )


def version_note(derived: TokenVersions, backend_name: str) -> dict:
    """The step's `state.token_versions`: where its versions came from, the swap it spans, and a warning
    ({code, message}) when some are unknown or a swap's place among the tokens is."""
    note: dict = {"source": "backend", "backend": backend_name, "version": derived.served}
    if derived.swap is not None:
        note["swap"] = {
            "from": derived.swap.from_version,
            "to": derived.swap.to_version,
            "paused_at": derived.swap.paused_at,
            "resumed_at": derived.swap.resumed_at,
        }
        note["split"] = derived.split
    if not derived.known:
        note["source"] = "unknown" if all(version < 0 for version in derived.versions) else "backend"
        note["warning"] = {
            "code": UNKNOWN_VERSION,
            "message": (
                f"backend {backend_name or '?'} reported no per-token policy versions and the version it "
                f"served is unknown or not a number ({derived.served or 'none registered'!r}); those tokens "
                "are recorded as version -1, which the staleness bound cannot age"
            ),
        }
    elif derived.split == "unknown":
        note["warning"] = {
            "code": SWAP_SPLIT_UNKNOWN,
            "message": (
                f"a weight swap ({derived.swap.from_version} → {derived.swap.to_version}) finished while this "
                "answer was generated; where it fell among the tokens is unknown, so all are recorded as "
                f"version {derived.served}, the older (conservative for the staleness bound)"
            ),
        }
    return note
