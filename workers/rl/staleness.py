"""The online run's staleness batching: what waits for a step, what a step takes, what is dropped as stale.

A generated token sampled by policy version v is stale once the learner's current version V is past v + η
(η, the staleness bound; context tokens carry version -1 and never age). The online runner (apps/training/
runners.py) moves trajectories through here in the order the qualified queue gave them:

- `classify` sorts newly queued trajectories against V: `waiting` (their samples built under η by
  workers.rl.samples.build_samples), `stale` (every sample held a stale token) or `empty` (no record, or
  nothing trainable). It counts the samples holding generated tokens of unknown version (-1), which the
  bound cannot age: kept (and then fresh whatever V is) or dropped, by `unknown_versions` (samples.py).
- `is_ready`: a step is due once at least `samples_per_step` samples wait.
- `take_batch` ages the waiting trajectories against V again (a publication since they arrived may have made
  them stale), drops those left without a fresh sample, then takes whole trajectories, oldest first, until
  the batch holds at least `samples_per_step` samples (the last one taken may overshoot: a trajectory's
  samples never straddle two steps), keeping only their fresh samples; the rest wait, in order.

Pure: frozen dataclasses and primitives in and out, no Django.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workers.rl.samples import TrainingSample, build_samples


@dataclass(frozen=True)
class Waiting:
    """A queued trajectory's samples, waiting for a step."""

    trajectory_id: str
    samples: tuple[TrainingSample, ...]


@dataclass(frozen=True)
class Intake:
    waiting: tuple[Waiting, ...]  # in queue order
    stale: tuple[str, ...]  # trajectory ids: every sample held a token older than V − η
    empty: tuple[str, ...]  # trajectory ids: no record, or nothing trainable (no reward, no generated token)
    unknown_version_samples: int = 0  # samples holding a generated token of version -1 (kept or dropped)


@dataclass(frozen=True)
class Batch:
    samples: tuple[TrainingSample, ...]  # what the step trains on; empty: nothing fresh was left
    trained: tuple[str, ...]  # trajectory ids the step takes, oldest first
    stale: tuple[str, ...]  # trajectory ids dropped: a publication aged every sample of theirs past η
    waiting: tuple[Waiting, ...]  # left for a later step, queue order kept


def oldest_fresh_version(*, current_version: int, eta: int) -> int:
    """The oldest policy version whose tokens are still fresh: V − η."""
    return current_version - eta


def is_fresh(sample: TrainingSample, *, oldest: int) -> bool:
    """No generated token of the sample is older than `oldest`. Context tokens (version -1) never age, and
    neither do generated tokens of unknown version (-1): `classify` counted them, and dropped their samples
    when asked to."""
    return all(
        version < 0 or version >= oldest
        for version, mask in zip(sample.versions, sample.loss_mask, strict=True)
        if mask
    )


def classify(
    pending: Sequence[str],
    records: Mapping[str, dict],
    *,
    current_version: int,
    eta: int,
    reward_discount: float | None = None,
    unknown_versions: str = "keep",
) -> Intake:
    """Sorts `pending` trajectory ids (queue order) by their training records (ATDP dicts, by trajectory id;
    a missing one is empty) under the bound η against `current_version`; `reward_discount` as in
    build_samples; samples holding generated tokens of unknown version are kept or dropped by
    `unknown_versions`, and counted either way."""
    waiting, stale, empty = [], [], []
    unknown = 0
    for trajectory_id in pending:
        record = records.get(trajectory_id)
        if record is None:
            empty.append(trajectory_id)
            continue
        sample_set = build_samples(
            [record],
            current_version=current_version,
            eta=eta,
            reward_discount=reward_discount,
            unknown_versions=unknown_versions,
        )
        unknown += sample_set.counts.unknown_version_samples
        if sample_set.samples:
            waiting.append(Waiting(trajectory_id=trajectory_id, samples=sample_set.samples))
        elif sample_set.counts.stale_samples:
            stale.append(trajectory_id)
        else:
            empty.append(trajectory_id)
    return Intake(
        waiting=tuple(waiting), stale=tuple(stale), empty=tuple(empty), unknown_version_samples=unknown
    )


def waiting_sample_count(waiting: Iterable[Waiting]) -> int:
    return sum(len(item.samples) for item in waiting)


def is_ready(waiting: Iterable[Waiting], *, samples_per_step: int) -> bool:
    """A step is due: at least `samples_per_step` samples wait (counted before `take_batch` ages them)."""
    return waiting_sample_count(waiting) >= samples_per_step


def take_batch(waiting: Sequence[Waiting], *, current_version: int, eta: int, samples_per_step: int) -> Batch:
    """The next step's batch from `waiting` (oldest first), against the learner's current version."""
    oldest = oldest_fresh_version(current_version=current_version, eta=eta)
    stale = tuple(
        item.trajectory_id
        for item in waiting
        if not any(is_fresh(sample, oldest=oldest) for sample in item.samples)
    )
    fresh = [item for item in waiting if item.trajectory_id not in stale]
    samples: list[TrainingSample] = []
    taken = 0
    for item in fresh:
        if len(samples) >= samples_per_step:
            break
        samples.extend(sample for sample in item.samples if is_fresh(sample, oldest=oldest))
        taken += 1
    return Batch(
        samples=tuple(samples),
        trained=tuple(item.trajectory_id for item in fresh[:taken]),
        stale=stale,
        waiting=tuple(fresh[taken:]),
    )
