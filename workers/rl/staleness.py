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

Lag along the lineage (`Lineage`): a version's lag is counted in training steps along the parent chain of
versions, not in the model's version numbers. Numbers are model-wide: a learner restarted from production
publishes its first version under the next free number, which can be many numbers past production although
it is one step from it; counted in numbers, everything production served would look that many versions old
and be dropped. `Lineage(current, parents).lag(v)` is the distance from the current version up to `v` (an
ancestor) or, for a version on another branch (a canary of an earlier learner), the steps from the current
version up to their nearest common ancestor plus those down to `v`; a version the lineage does not know falls
back to the difference of numbers. With a lineage, `classify` and `take_batch` judge freshness by that lag,
and the samples they hand on carry versions relabelled V − lag, so whatever counts V − v downstream (the
trainer's lag histogram, the log-linear proximal) counts the chain too.

The bound is kept rather than enforced by dropping (AReaL bounds staleness where rollouts are made):
- `take_batch(..., max_samples=)`: a waiting trajectory at lag η is due (the step's publication would age it
  past η); the due ones join the step first, up to `max_samples`, instead of being dropped at the next one.
- The learner does not hold its next step while production is η behind it: with the gateway's back-pressure
  (apps/training/online.py: no new session once (ρ + v + 1)·B are out, v the steps trained, ρ the run's
  rollout bound, else η) a held learner trains nothing, so no session starts, no canary gets traffic and no
  release catches production up (a deadlock, seen in the demo). What production serves while the learner
  runs η ahead is dropped as stale: a run fed by a lagging production takes an η that covers a release's lag
  and a ρ that paces its traffic to the learner.
- `lag_histogram`: trained samples by their oldest generated token's lag, for the run's staleness chart.

Whole GRPO groups (TrainConfig.whole_groups): a sample's advantage is its reward less its group's mean in the
batch, so a group cut by a batch's edge gives its members the mean of a part (a lone member: its own reward,
advantage zero). With `unsettled` (the group ids some of whose sessions are still undecided, which the runner
asks the database for), `is_ready` and `take_batch` count and take a group only once it is settled, and all of
it; a due trajectory brings its whole group, settled or not. `uniform_groups` names the settled groups whose
rewards are all alike (DAPO's dynamic sampling: TrainConfig.skip_uniform_groups), which a step would spend a
place on for no gradient.

Pure: frozen dataclasses and primitives in and out, no Django.
"""

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

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


@dataclass(frozen=True)
class Lineage:
    """The model's versions as a tree: `parents` maps a version number to its parent's (None: a root);
    `current` is the learner's version V."""

    current: int
    parents: Mapping[int, int | None] = field(default_factory=dict)

    @cached_property
    def _chain(self) -> dict[int, int]:
        """The current version's ancestors (itself included) → steps from the current version."""
        chain: dict[int, int] = {}
        node: int | None = self.current
        while node is not None and node not in chain:
            chain[node] = len(chain)
            node = self.parents.get(node)
        return chain

    def lag(self, version: int) -> int:
        """Training steps between `version` and the current one (module docstring); 0 for -1 (context, or
        a generated token of unknown version: never aged here)."""
        if version < 0:
            return 0
        chain = self._chain
        steps, seen = 0, set()
        node: int | None = version
        while node is not None and node not in seen:
            if node in chain:
                return steps + chain[node]
            if node not in self.parents:
                break
            seen.add(node)
            node = self.parents[node]
            steps += 1
        return max(self.current - version, 0)  # not in the lineage: model-wide numbers, as before

    def advanced(self, version: int) -> "Lineage":
        """The lineage once `version` (a child of the current one) is published and becomes current."""
        return Lineage(current=version, parents={**self.parents, version: self.current})


def relabel(sample: TrainingSample, lineage: Lineage) -> TrainingSample:
    """The sample with each generated token's version written V − lag (context and unknown: kept -1)."""
    versions = tuple(
        version if version < 0 else lineage.current - lineage.lag(version) for version in sample.versions
    )
    return sample if versions == sample.versions else replace(sample, versions=versions)


def sample_lag(sample: TrainingSample, lineage: Lineage) -> int:
    """The lag of the sample's oldest generated (trained) token; 0 with none of known version."""
    return max(
        (
            lineage.lag(version)
            for version, mask in zip(sample.versions, sample.loss_mask, strict=True)
            if mask and version >= 0
        ),
        default=0,
    )


def lag_histogram(samples: Iterable[TrainingSample], lineage: Lineage) -> dict[int, int]:
    """Samples by the lag of their oldest trained token against `lineage`, in lag order."""
    counts: Counter[int] = Counter(sample_lag(sample, lineage) for sample in samples)
    return dict(sorted(counts.items()))


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
    lineage: Lineage | None = None,
) -> Intake:
    """Sorts `pending` trajectory ids (queue order) by their training records (ATDP dicts, by trajectory id;
    a missing one is empty) under the bound η against `current_version`; `reward_discount` as in
    build_samples; samples holding generated tokens of unknown version are kept or dropped by
    `unknown_versions`, and counted either way. With a `lineage` (its current version is `current_version`)
    a sample is fresh when its lag along the lineage is at most η; the waiting samples keep the versions
    their tokens were sampled by (take_batch relabels them against the lineage of its step)."""
    waiting, stale, empty = [], [], []
    unknown = 0
    for trajectory_id in pending:
        record = records.get(trajectory_id)
        if record is None:
            empty.append(trajectory_id)
            continue
        sample_set = build_samples(
            [record],
            current_version=None if lineage else current_version,
            eta=None if lineage else eta,
            reward_discount=reward_discount,
            unknown_versions=unknown_versions,
        )
        unknown += sample_set.counts.unknown_version_samples
        samples = sample_set.samples
        aged_out = sample_set.counts.stale_samples
        if lineage is not None:
            fresh = tuple(sample for sample in samples if sample_lag(sample, lineage) <= eta)
            aged_out, samples = len(samples) - len(fresh), fresh
        if samples:
            waiting.append(Waiting(trajectory_id=trajectory_id, samples=samples))
        elif aged_out:
            stale.append(trajectory_id)
        else:
            empty.append(trajectory_id)
    return Intake(
        waiting=tuple(waiting), stale=tuple(stale), empty=tuple(empty), unknown_version_samples=unknown
    )


def group_of(item: Waiting) -> str:
    """The GRPO group (`group_id`) the trajectory's samples share; "" for none."""
    return next((sample.group_id for sample in item.samples if sample.group_id), "")


def _units(waiting: Iterable[Waiting], unsettled: Collection[str] | None) -> list[list[Waiting]]:
    """The waiting trajectories in the units a step takes whole, in order of their first member: each
    trajectory alone, or with `unsettled` given (whole groups), a group's trajectories together."""
    units: dict[str, list[Waiting]] = {}
    for item in waiting:
        group = group_of(item) if unsettled is not None else ""
        units.setdefault(f"group:{group}" if group else f"trajectory:{item.trajectory_id}", []).append(item)
    return list(units.values())


def _settled(unit: list[Waiting], unsettled: Collection[str] | None) -> bool:
    return not unsettled or group_of(unit[0]) not in unsettled


def waiting_sample_count(waiting: Iterable[Waiting], *, unsettled: Collection[str] | None = None) -> int:
    """Samples waiting, those of `unsettled` groups left out."""
    return sum(
        len(item.samples) for unit in _units(waiting, unsettled) if _settled(unit, unsettled) for item in unit
    )


def is_ready(
    waiting: Iterable[Waiting], *, samples_per_step: int, unsettled: Collection[str] | None = None
) -> bool:
    """A step is due: at least `samples_per_step` samples wait (counted before `take_batch` ages them), those
    of `unsettled` groups left out."""
    return waiting_sample_count(waiting, unsettled=unsettled) >= samples_per_step


def uniform_groups(waiting: Iterable[Waiting], *, unsettled: Collection[str]) -> tuple[str, ...]:
    """Trajectory ids of the settled groups (a group id, not in `unsettled`) whose waiting samples all hold
    one reward (DAPO's dynamic sampling): against its group's mean each such sample's advantage is zero, so
    the group adds nothing to a step and only takes its place in the batch."""
    uniform: list[str] = []
    for unit in _units(waiting, unsettled):
        if not group_of(unit[0]) or not _settled(unit, unsettled):
            continue
        rewards = {sample.reward for item in unit for sample in item.samples}
        if len(rewards) == 1:
            uniform.extend(item.trajectory_id for item in unit)
    return tuple(uniform)


def take_batch(
    waiting: Sequence[Waiting],
    *,
    current_version: int,
    eta: int,
    samples_per_step: int,
    lineage: Lineage | None = None,
    max_samples: int | None = None,
    unsettled: Collection[str] | None = None,
) -> Batch:
    """The next step's batch from `waiting` (oldest first), against the learner's current version (and, when
    given, its `lineage`: freshness by lag along it, and the batch's samples relabelled V − lag). With
    `max_samples`, the trajectories this step's publication would age past η (lag η: due) join the batch
    first, in queue order, beyond `samples_per_step` if need be but within `max_samples`. With `unsettled`
    (whole groups: the group ids some of whose sessions are still undecided), a group's trajectories are
    taken together, and a group in `unsettled` waits unless one of its trajectories is due."""
    if lineage is None:
        lineage = Lineage(current=current_version)  # no parents known: lags are differences of numbers

    def fresh_samples(item: Waiting) -> list[TrainingSample]:
        return [sample for sample in item.samples if sample_lag(sample, lineage) <= eta]

    stale = tuple(item.trajectory_id for item in waiting if not fresh_samples(item))
    fresh = [item for item in waiting if item.trajectory_id not in stale]
    units = _units(fresh, unsettled)
    due: list[list[Waiting]] = []
    if max_samples is not None:
        room = max_samples
        for unit in units:
            kept = [sample for item in unit for sample in fresh_samples(item)]
            if any(sample_lag(sample, lineage) == eta for sample in kept) and len(kept) <= room:
                due.append(unit)
                room -= len(kept)
    taken = list(due)
    count = sum(len(fresh_samples(item)) for unit in due for item in unit)
    for unit in units:
        if count >= samples_per_step:
            break
        if unit in due or not _settled(unit, unsettled):
            continue
        taken.append(unit)
        count += sum(len(fresh_samples(item)) for item in unit)
    chosen = {item.trajectory_id for unit in taken for item in unit}
    samples = [sample for item in fresh if item.trajectory_id in chosen for sample in fresh_samples(item)]
    return Batch(
        samples=tuple(relabel(sample, lineage) for sample in samples),
        trained=tuple(item.trajectory_id for item in fresh if item.trajectory_id in chosen),
        stale=stale,
        waiting=tuple(item for item in fresh if item.trajectory_id not in chosen),
    )
