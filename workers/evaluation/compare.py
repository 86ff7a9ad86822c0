"""Candidate vs baseline: per-metric differences with bootstrap confidence intervals, and per-case flips."""

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy

from workers.stats import percentile


@dataclass(frozen=True)
class Interval:
    """candidate − baseline, with a percentile bootstrap interval; `paired` when cases were matched by key."""

    difference: float
    low: float
    high: float
    candidate_mean: float
    baseline_mean: float
    samples: int
    paired: bool

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Flips:
    regressed: tuple[str, ...]  # passed on the baseline, fail on the candidate
    fixed: tuple[str, ...]  # failed on the baseline, pass on the candidate
    unchanged: int
    only_candidate: tuple[str, ...]
    only_baseline: tuple[str, ...]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def bootstrap_difference(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    paired: bool = False,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval | None:
    """Mean difference with a percentile bootstrap interval. Paired: both sequences are per-case values in the
    same order and cases are resampled together (the right test for one suite run twice); otherwise each arm
    is resampled on its own (canary traffic). None when an arm is empty. Deterministic for a given seed."""
    if not candidate or not baseline:
        return None
    if paired and len(candidate) != len(baseline):
        raise ValueError("paired samples need equal lengths")
    rng = random.Random(seed)
    observed = _mean(candidate) - _mean(baseline)
    differences: list[float] = []
    if paired:
        deltas = [first - second for first, second in zip(candidate, baseline, strict=True)]
        count = len(deltas)
        differences.extend(
            sum(deltas[rng.randrange(count)] for _ in range(count)) / count for _ in range(resamples)
        )
    else:
        for _ in range(resamples):
            first = [candidate[rng.randrange(len(candidate))] for _ in candidate]
            second = [baseline[rng.randrange(len(baseline))] for _ in baseline]
            differences.append(_mean(first) - _mean(second))
    tail = (1 - confidence) / 2
    low, high = percentile(differences, tail), percentile(differences, 1 - tail)
    if low is None or high is None:
        raise ValueError("a bootstrap interval needs at least one resample")
    return Interval(
        difference=observed,
        low=low,
        high=high,
        candidate_mean=_mean(candidate),
        baseline_mean=_mean(baseline),
        samples=min(len(candidate), len(baseline)),
        paired=paired,
    )


@dataclass(frozen=True)
class MeanInterval:
    """A mean (an accuracy, for 0/1 values) with a percentile bootstrap interval."""

    mean: float
    low: float
    high: float
    samples: int


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> MeanInterval | None:
    """The mean of one sample with a percentile bootstrap interval (cases resampled with replacement), by the
    same percentile as `bootstrap_difference`. None for no values. Deterministic for a given seed."""
    if not values:
        return None
    if resamples < 1:
        raise ValueError("a bootstrap interval needs at least one resample")
    samples = numpy.asarray(values, dtype=float)
    draws = numpy.random.default_rng(seed).integers(0, samples.size, size=(resamples, samples.size))
    means = samples[draws].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = percentile(means, tail), percentile(means, 1 - tail)
    if low is None or high is None:
        raise ValueError("a bootstrap interval needs at least one resample")
    return MeanInterval(mean=float(samples.mean()), low=low, high=high, samples=int(samples.size))


def case_flips(candidate: Mapping[str, bool], baseline: Mapping[str, bool]) -> Flips:
    """Which cases changed verdict between the runs (keys are case keys; values: passed)."""
    shared = sorted(set(candidate) & set(baseline))
    return Flips(
        regressed=tuple(key for key in shared if baseline[key] and not candidate[key]),
        fixed=tuple(key for key in shared if candidate[key] and not baseline[key]),
        unchanged=sum(1 for key in shared if candidate[key] == baseline[key]),
        only_candidate=tuple(sorted(set(candidate) - set(baseline))),
        only_baseline=tuple(sorted(set(baseline) - set(candidate))),
    )


@dataclass(frozen=True)
class CaseValue:
    key: str
    category: str
    score: float
    passed: bool


@dataclass(frozen=True)
class Comparison:
    metrics: dict[str, Interval]
    flips: Flips


def compare_runs(
    candidate: Sequence[CaseValue], baseline: Sequence[CaseValue], *, resamples: int = 2000, seed: int = 0
) -> Comparison:
    """Paired comparison of two runs of one suite: `score` and `pass_rate` overall and per category
    (`<category>.pass_rate`), over the cases both runs scored."""
    by_key = {value.key: value for value in baseline}
    pairs = [(value, by_key[value.key]) for value in candidate if value.key in by_key]
    metrics: dict[str, Interval] = {}
    groups = {"": pairs}
    for pair in pairs:
        groups.setdefault(pair[0].category, []).append(pair)
    for category, members in groups.items():
        if not members:
            continue
        prefix = f"{category}." if category else ""
        pass_rate = bootstrap_difference(
            [float(first.passed) for first, _ in members],
            [float(second.passed) for _, second in members],
            paired=True,
            resamples=resamples,
            seed=seed,
        )
        assert pass_rate is not None  # members is not empty, so neither arm is
        metrics[f"{prefix}pass_rate"] = pass_rate
        if not category:
            score = bootstrap_difference(
                [first.score for first, _ in members],
                [second.score for _, second in members],
                paired=True,
                resamples=resamples,
                seed=seed,
            )
            assert score is not None  # members is not empty, so neither arm is
            metrics["score"] = score
    flips = case_flips(
        {value.key: value.passed for value in candidate}, {value.key: value.passed for value in baseline}
    )
    return Comparison(metrics=metrics, flips=flips)
