"""Per-token policy versions for a backend that reports none (vLLM, other OpenAI-compatible servers), derived
from the version it served and the weight swaps it went through while a request ran.

A swap is a publication: generation paused at `paused_at`, weights replaced, resumed at `resumed_at` (wall
clock, seconds since the epoch, as the publisher saw them). No token is generated while a backend is paused,
so the version a token was sampled by is decided by where the moment the gateway received it falls against
the swaps' resume moments: before a swap's resume, the version before it; after, the version it brought.

- A stream (`stream_versions`): each chunk's tokens get the version served when the gateway received the
  chunk. A token generated just before a resume but received just after it would get the new version; the
  publisher stamps `resumed_at` only after the backend acknowledged the resume, so the error runs the other
  way: a token generated just after the resume and received before the stamp keeps the old version, which
  is the conservative side for the staleness bound (a token looks older, never newer, than it is).
- A whole answer (`answer_versions`): the tokens' arrival is not seen, so a swap that resumed between the
  forward and the answer leaves the split unknown. Every token then gets the version served when the request
  was forwarded (the older), and the result says so (`split="unknown"`), for the step to carry a warning.
- A version that is not an integer (a server's own label, an operator's free text) is unknown: -1, as a
  token whose version nothing reported.

Pure: frozen dataclasses and primitives, no Django.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

UNKNOWN = -1
PENDING_SECONDS = 600.0  # no publication pauses a backend longer


@dataclass(frozen=True)
class WeightSwap:
    from_version: str
    to_version: str
    paused_at: float
    resumed_at: float | None  # None: paused, not resumed yet (a publication in progress)


@dataclass(frozen=True)
class ServedVersions:
    """A backend's recent swaps, oldest first (at least one). Before the first, it served its `from_version`."""

    swaps: tuple[WeightSwap, ...]

    def version_at(self, moment: float) -> str:
        """The version the backend served at `moment`."""
        version = self.swaps[0].from_version
        for swap in self.swaps:
            if swap.resumed_at is not None and swap.resumed_at <= moment:
                version = swap.to_version
        return version

    @property
    def current(self) -> str:
        """The version it serves now, or will once a swap in progress resumes."""
        return self.swaps[-1].to_version

    def pending_since(self, moment: float) -> bool:
        """A swap paused at or before `moment`, and less than PENDING_SECONDS before it, has not resumed (as
        far as this record knows). An older pending swap is one whose publisher died: it is not waited on."""
        return any(
            swap.resumed_at is None and moment - PENDING_SECONDS < swap.paused_at <= moment
            for swap in self.swaps
        )

    def resumed_between(self, start: float, end: float) -> WeightSwap | None:
        """The last swap that resumed after `start` and no later than `end`."""
        found = None
        for swap in self.swaps:
            if swap.resumed_at is not None and start < swap.resumed_at <= end:
                found = swap
        return found


@dataclass(frozen=True)
class TokenVersions:
    versions: tuple[int, ...]
    served: str  # the version served when the request was forwarded ("" when none was known)
    swap: WeightSwap | None = None  # the swap that resumed while the request ran
    split: str = ""  # "stream": tokens split at the swap; "unknown": a whole answer, all given the older

    @property
    def known(self) -> bool:
        """Every token's version is known (vacuously, without tokens)."""
        return all(version >= 0 for version in self.versions)


def as_version(value: str | int | None) -> int:
    """A policy version number, or UNKNOWN for anything that is not a non-negative integer."""
    if isinstance(value, int):
        return value if value >= 0 else UNKNOWN
    text = (value or "").strip()
    return int(text) if text.isdigit() else UNKNOWN


def answer_versions(
    served: ServedVersions | None, *, fallback: str, count: int, started_at: float, ended_at: float
) -> TokenVersions:
    """Versions of a whole answer's `count` tokens, forwarded at `started_at` and answered at `ended_at`.
    Without a swap record, every token gets `fallback` (the version the backend row names)."""
    if served is None:
        return TokenVersions(versions=(as_version(fallback),) * count, served=fallback)
    version = served.version_at(started_at)
    swap = served.resumed_between(started_at, ended_at)
    return TokenVersions(
        versions=(as_version(version),) * count,
        served=version,
        swap=swap,
        split="unknown" if swap is not None and count else "",
    )


def stream_versions(
    served: ServedVersions | None,
    *,
    fallback: str,
    arrivals: Sequence[tuple[float, int]],
    count: int,
    started_at: float,
) -> TokenVersions:
    """Versions of a stream's `count` tokens from `arrivals`, (moment received, tokens in that chunk) in
    order. Tokens beyond what the arrivals account for get the version of the last arrival."""
    if served is None:
        return TokenVersions(versions=(as_version(fallback),) * count, served=fallback)
    versions: list[int] = []
    last = served.version_at(started_at)
    for moment, tokens in arrivals:
        last = served.version_at(moment)
        versions.extend([as_version(last)] * tokens)
    versions = versions[:count] + [as_version(last)] * max(0, count - len(versions))
    ended_at = arrivals[-1][0] if arrivals else started_at
    swap = served.resumed_between(started_at, ended_at)
    return TokenVersions(
        versions=tuple(versions),
        served=served.version_at(started_at),
        swap=swap,
        split="stream" if swap is not None else "",
    )


def swaps_from_json(rows: Iterable) -> ServedVersions | None:
    """The cached form (a list of [from, to, paused_at, resumed_at or null]) read back; None when empty or
    unreadable."""
    try:
        swaps = tuple(
            WeightSwap(str(row[0]), str(row[1]), float(row[2]), None if row[3] is None else float(row[3]))
            for row in rows
        )
    except (TypeError, ValueError, IndexError):
        return None
    return ServedVersions(swaps) if swaps else None


def swaps_to_json(served: ServedVersions) -> list[list]:
    return [[s.from_version, s.to_version, s.paused_at, s.resumed_at] for s in served.swaps]
