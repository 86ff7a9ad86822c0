"""Training samples from ATDP trajectories: the training view, minus retry orphans, under a staleness bound.

The merge itself is workers.atdp.training_view.training_samples (reused, not duplicated): consecutive
llm_calls merge into one sample only when the next call's prompt ids begin with the whole sample so
far (same tokenizer); the prompt's new part (tool output, the next user turn, template tokens) is
context with loss_mask 0, logprob 0.0 and version -1; completions carry loss_mask 1 and their
behaviour logprobs and per-token policy versions. This module adds:

- Retry orphans dropped before the merge: an llm_call that a later call retried (the later one's
  `retry_of`, in `result` as ATDP export writes it or at the top level as the gateway journal does,
  names it) was replaced and never reached the agent; an aborted llm_call never finished. Keeping
  either would make a spurious sample (the retry's prompt does not extend the orphan's completion).
- `turns`: for every token, the index (within its sample) of the llm_call that contributed it, so
  advantages can discount reward across turns.
- The staleness bound eta: with the current policy version V, a generated token sampled by version
  v < V - eta is stale. `staleness="sample"` drops every sample holding a stale token (AReaL's bound on
  whole rollouts); `staleness="token"` only masks stale tokens from the loss (they stay as context),
  and drops a sample left without generated tokens. Both are counted, and a histogram of V - v over the
  kept generated tokens is returned for the staleness chart.
- Per-step rewards (workers.rl.step_rewards): a record whose `step_rewards` names rewards of single steps
  (`{"steps": {step_id: value}, "outcome": value}`, as apps.training.selectors.training_records writes it),
  or any record under a `reward_discount`, gives each llm_call its own training reward. When those differ
  within a trajectory, a merged sample is cut where the reward changes: each piece is a sample of its
  own that trains its steps' completions with their reward, the earlier turns kept as context (loss_mask 0,
  logprob 0.0, version -1), and each piece is its own unit for GRPO's statistics (`unit_id`). When they are
  all equal (one reward, or none on any step) the samples are the ones the trajectory's reward gives.
- Unknown versions: a generated token recorded with version -1 (a backend that reported none, and no
  version the gateway could derive; apps/gateway/versions.py) cannot be aged by the bound, which only
  compares known versions. `unknown_versions="keep"` (the default) keeps such samples and counts them: the
  bound lets them through and the log-linear proximal gives them alpha 0 (their proximal logprob is the
  behaviour one: plain PPO for those tokens). `"drop"` leaves out every sample holding one, counted.
- Frozen dataclasses out; samples without a reward or without a generated token are dropped, counted.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from workers.atdp.training_view import (
    CONTEXT_LOGPROB,
    CONTEXT_VERSION,
    training_blockers,
    training_reward,
    training_samples,
)
from workers.rl.step_rewards import runs_of_equal_rewards, step_rewards

STALENESS_MODES = ("sample", "token")
UNKNOWN_VERSION_MODES = ("keep", "drop")


@dataclass(frozen=True)
class TrainingSample:
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]  # behaviour logprob of each generated token; 0.0 on context
    versions: tuple[int, ...]  # policy version that sampled each generated token; -1 on context
    turns: tuple[int, ...]  # index of the llm_call (within this sample) each token came from
    reward: float | None
    group_id: str | None
    task_id: str | None
    trajectory_id: str
    step_ids: tuple[str, ...]
    unit_id: str = ""  # GRPO's unit when not the whole trajectory: a piece cut by per-step rewards

    @property
    def unit(self) -> str:
        """What GRPO counts once: the trajectory, or the piece of it that trains with its own reward."""
        return self.unit_id or self.trajectory_id

    @property
    def generated_count(self) -> int:
        return sum(self.loss_mask)

    @property
    def num_turns(self) -> int:
        return len(self.step_ids)


@dataclass(frozen=True)
class SampleCounts:
    trajectories: int = 0
    blocked_trajectories: int = 0  # training_blockers() named a reason (only with check_blockers)
    samples: int = 0  # kept
    retry_orphans: int = 0  # superseded llm_calls dropped
    aborted_calls: int = 0  # aborted llm_calls dropped
    stale_tokens: int = 0  # generated tokens older than V - eta (masked, or dropped with their sample)
    stale_samples: int = 0  # samples dropped for staleness
    no_reward: int = 0  # samples dropped for want of a reward
    empty_samples: int = 0  # samples with no generated token
    unknown_version_samples: int = 0  # samples holding a generated token of version -1: kept or dropped
    unknown_version_tokens: int = 0  # generated tokens of version -1 in those samples


@dataclass(frozen=True)
class SampleSet:
    samples: tuple[TrainingSample, ...]
    counts: SampleCounts
    staleness_histogram: tuple[
        tuple[int, int], ...
    ]  # (V - v, kept generated tokens), sorted; empty without V


def dropped_calls(record: dict) -> tuple[set[str], set[str]]:
    """(retry orphans, aborted calls): the step ids of llm_calls kept out of the samples."""
    retried = set()
    aborted = set()
    for step in record["steps"]:
        retry_of = step.get("retry_of") or (step.get("result") or {}).get("retry_of")
        if retry_of:
            retried.add(str(retry_of))
        if step["kind"] == "llm_call" and (step.get("aborted") or (step.get("result") or {}).get("aborted")):
            aborted.add(step["step_id"])
    calls = {step["step_id"] for step in record["steps"] if step["kind"] == "llm_call"}
    orphans = retried & calls
    return orphans, aborted - orphans


def trajectory_samples(
    record: dict,
    *,
    current_version: int | None = None,
    eta: int | None = None,
    staleness: str = "sample",
    require_reward: bool = True,
    reward_discount: float | None = None,
    unknown_versions: str = "keep",
) -> SampleSet:
    return build_samples(
        [record],
        current_version=current_version,
        eta=eta,
        staleness=staleness,
        require_reward=require_reward,
        reward_discount=reward_discount,
        unknown_versions=unknown_versions,
    )


def build_samples(
    records: Iterable[dict],
    *,
    current_version: int | None = None,
    eta: int | None = None,
    staleness: str = "sample",
    require_reward: bool = True,
    check_blockers: bool = False,
    reward_discount: float | None = None,
    unknown_versions: str = "keep",
) -> SampleSet:
    """Samples of every record in order. `eta` needs `current_version`; None disables the bound.
    `reward_discount`: AReaL's backpropagation of per-step rewards (workers.rl.step_rewards); None: a step
    without its own reward trains with the trajectory's. `unknown_versions`: keep or drop samples holding a
    generated token of version -1 (module docstring)."""
    if staleness not in STALENESS_MODES:
        raise ValueError(f"staleness must be one of {STALENESS_MODES}")
    if unknown_versions not in UNKNOWN_VERSION_MODES:
        raise ValueError(f"unknown_versions must be one of {UNKNOWN_VERSION_MODES}")
    oldest: int | None = None
    if eta is not None:
        if current_version is None or eta < 0:
            raise ValueError("a staleness bound needs current_version and eta >= 0")
        oldest = current_version - eta
    counts: Counter[str] = Counter()
    histogram: Counter[int] = Counter()
    kept: list[TrainingSample] = []
    for record in records:
        counts["trajectories"] += 1
        if check_blockers and training_blockers(record):
            counts["blocked_trajectories"] += 1
            continue
        orphans, aborted = dropped_calls(record)
        counts["retry_orphans"] += len(orphans)
        counts["aborted_calls"] += len(aborted)
        steps = [step for step in record["steps"] if step["step_id"] not in orphans | aborted]
        by_id = {step["step_id"]: step for step in steps}
        per_step = _per_step_rewards(record, steps, reward_discount)
        for sample in _with_step_rewards(
            [_to_sample(view, record, by_id) for view in training_samples({**record, "steps": steps})],
            per_step,
        ):
            if require_reward and sample.reward is None:
                counts["no_reward"] += 1
                continue
            if oldest is not None:
                within_bound, stale = _apply_staleness(sample, oldest, staleness)
                counts["stale_tokens"] += stale
                if within_bound is None:
                    counts["stale_samples"] += 1
                    continue
                sample = within_bound
            if not sample.generated_count:
                counts["empty_samples"] += 1
                continue
            unknown = unknown_version_tokens(sample)
            if unknown:
                counts["unknown_version_samples"] += 1
                counts["unknown_version_tokens"] += unknown
                if unknown_versions == "drop":
                    continue
            if current_version is not None:
                histogram.update(
                    current_version - version
                    for version, mask in zip(sample.versions, sample.loss_mask, strict=True)
                    if mask and version >= 0
                )
            kept.append(sample)
    counts["samples"] = len(kept)
    return SampleSet(
        samples=tuple(kept),
        counts=SampleCounts(**counts),
        staleness_histogram=tuple(sorted(histogram.items())),
    )


def unknown_version_tokens(sample: TrainingSample) -> int:
    """Generated tokens of the sample whose policy version is unknown (negative)."""
    return sum(
        1 for version, mask in zip(sample.versions, sample.loss_mask, strict=True) if mask and version < 0
    )


def _to_sample(view: dict, record: dict, steps: dict[str, dict]) -> TrainingSample:
    turns: list[int] = []
    for turn, step_id in enumerate(view["step_ids"]):
        tokens = steps[step_id]["tokens"]
        end = len(tokens["prompt_ids"]) + len(tokens["completion_ids"])
        turns += [turn] * (end - len(turns))
    reward = view["reward"]
    return TrainingSample(
        input_ids=tuple(view["input_ids"]),
        loss_mask=tuple(int(m) for m in view["loss_mask"]),
        logprobs=tuple(float(x) for x in view["logprobs"]),
        versions=tuple(int(v) for v in view["versions"]),
        turns=tuple(turns),
        reward=float(reward) if reward is not None else None,
        group_id=view["group_id"],
        task_id=record.get("task_id"),
        trajectory_id=view["trajectory_id"],
        step_ids=tuple(view["step_ids"]),
    )


def _per_step_rewards(
    record: dict, steps: list[dict], discount: float | None
) -> dict[str, float | None] | None:
    """Each kept llm_call's training reward, or None when the record keeps no per-step rewards and no
    discount applies (the trajectory's reward then trains every sample, as it always did)."""
    kept = record.get("step_rewards")
    if kept is None and discount is None:
        return None
    trajectory = training_reward(record)
    own = (kept or {}).get("steps") or {}
    outcome = kept.get("outcome") if kept is not None else trajectory
    calls = [step["step_id"] for step in steps if step["kind"] == "llm_call"]
    values = step_rewards(
        [own.get(call) for call in calls], trajectory=trajectory, outcome=outcome, discount=discount
    )
    return dict(zip(calls, values, strict=True))


def _with_step_rewards(
    samples: list[TrainingSample], rewards: dict[str, float | None] | None
) -> list[TrainingSample]:
    """The trajectory's samples with their steps' rewards: unchanged but for the reward when every trained
    step has the same, else cut where the reward changes (each piece its own GRPO unit)."""
    if rewards is None:
        return samples
    if len({rewards[step_id] for sample in samples for step_id in sample.step_ids}) <= 1:
        return [replace(sample, reward=rewards[sample.step_ids[0]]) for sample in samples]
    pieces = []
    for sample in samples:
        values = [rewards[step_id] for step_id in sample.step_ids]
        pieces += [
            _piece(sample, first, last, values[first]) for first, last in runs_of_equal_rewards(values)
        ]
    return pieces


def _piece(sample: TrainingSample, first: int, last: int, reward: float | None) -> TrainingSample:
    """Turns first..last of a merged sample, trained with `reward`: the tokens of earlier turns become context
    (AReaL's per-interaction samples: the interaction's whole prompt, then its completion)."""
    start = next(index for index, turn in enumerate(sample.turns) if turn >= first)
    end = next((index for index, turn in enumerate(sample.turns) if turn > last), len(sample.turns))
    step_ids = sample.step_ids[first : last + 1]
    return replace(
        sample,
        input_ids=sample.input_ids[:end],
        loss_mask=(0,) * start + sample.loss_mask[start:end],
        logprobs=(CONTEXT_LOGPROB,) * start + sample.logprobs[start:end],
        versions=(CONTEXT_VERSION,) * start + sample.versions[start:end],
        turns=(0,) * start + tuple(turn - first for turn in sample.turns[start:end]),
        reward=reward,
        step_ids=step_ids,
        unit_id=f"{sample.trajectory_id}/{step_ids[0]}",
    )


def _apply_staleness(sample: TrainingSample, oldest: int, mode: str) -> tuple[TrainingSample | None, int]:
    stale = [
        bool(mask) and 0 <= version < oldest
        for mask, version in zip(sample.loss_mask, sample.versions, strict=True)
    ]
    count = sum(stale)
    if not count:
        return sample, 0
    if mode == "sample":
        return None, count
    mask = tuple(0 if old else m for m, old in zip(sample.loss_mask, stale, strict=True))
    if not any(mask):
        return None, count
    return replace(sample, loss_mask=mask), count
