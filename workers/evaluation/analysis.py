"""Guardrail analysis for canary releases, Argo Rollouts style: each tick measures every guardrail for the
candidate and the baseline and yields Successful, Failed or Inconclusive; limits on consecutive failed and
inconclusive ticks decide when the release rolls back or pauses for an operator."""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from workers.evaluation.compare import bootstrap_difference
from workers.stats import percentile

JUDGES = ("point", "interval")
METRICS = ("reward_mean", "user_correction_rate", "error_rate", "latency_p95", "cost_per_task", "eval_score")
# Which way each metric gets worse; a guardrail may say otherwise.
WORSE_WHEN_HIGHER = {"user_correction_rate", "error_rate", "latency_p95", "cost_per_task"}


class Verdict(StrEnum):
    SUCCESSFUL = "successful"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Guardrail:
    """`threshold`: the most the candidate may be worse than the baseline (absolute units of the metric);
    `direction`: "lower_is_better" or "higher_is_better"; `min_samples`: per arm, below it → Inconclusive;
    `judge`: "point" fails a candidate whose measured deficit exceeds the threshold, "interval" one whose
    deficit exceeds it over the whole 95 % bootstrap interval (with threshold 0: significantly worse at
    all; for short canaries on noisy metrics, where a point threshold must be loose to spare good
    candidates). A p95 metric has no interval and is judged on its point value."""

    metric: str
    direction: str
    threshold: float
    min_samples: int = 30
    judge: str = "point"


@dataclass(frozen=True)
class Measurement:
    metric: str
    candidate: float | None
    baseline: float | None
    candidate_samples: int
    baseline_samples: int
    verdict: Verdict
    reason: str
    low: float | None = None  # bootstrap interval of candidate − baseline, when samples allow
    high: float | None = None


def guardrail_problems(guardrail: dict) -> dict[str, str]:
    problems = {}
    if guardrail.get("metric") not in METRICS:
        problems["metric"] = f"must be one of {', '.join(METRICS)}"
    if guardrail.get("direction") not in {"lower_is_better", "higher_is_better"}:
        problems["direction"] = "must be lower_is_better or higher_is_better"
    try:
        if float(guardrail["threshold"]) < 0:
            problems["threshold"] = "must be ≥ 0"
    except (KeyError, TypeError, ValueError):
        problems["threshold"] = "must be a number"
    if guardrail.get("judge", "point") not in JUDGES:
        problems["judge"] = f"must be one of {', '.join(JUDGES)}"
    minimum = guardrail.get("min_samples", 30)
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
        problems["min_samples"] = "must be a positive integer"
    return problems


def measure(
    guardrail: Guardrail, candidate: Sequence[float], baseline: Sequence[float], *, aggregate: str = "mean"
) -> Measurement:
    """One guardrail over per-sample values of each arm (0/1 for rates, milliseconds for latency). The value
    compared is the mean, or the 95th percentile with `aggregate="p95"`."""

    def value(samples):
        if not samples:
            return None
        return percentile(samples, 0.95) if aggregate == "p95" else sum(samples) / len(samples)

    candidate_value, baseline_value = value(candidate), value(baseline)
    common = {
        "metric": guardrail.metric,
        "candidate": candidate_value,
        "baseline": baseline_value,
        "candidate_samples": len(candidate),
        "baseline_samples": len(baseline),
    }
    if len(candidate) < guardrail.min_samples or len(baseline) < guardrail.min_samples:
        return Measurement(
            **common,
            verdict=Verdict.INCONCLUSIVE,
            reason=f"{len(candidate)} candidate / {len(baseline)} baseline samples; "
            f"{guardrail.min_samples} needed per arm",
        )
    worse_by = (
        candidate_value - baseline_value
        if guardrail.direction == "lower_is_better"
        else baseline_value - candidate_value
    )
    interval = bootstrap_difference(candidate, baseline, resamples=500) if aggregate == "mean" else None
    low, high = (interval.low, interval.high) if interval else (None, None)
    if guardrail.judge == "interval" and low is not None and high is not None:
        # The least deficit the interval allows (candidate − baseline is [low, high]).
        least = low if guardrail.direction == "lower_is_better" else -high
        if least > guardrail.threshold:
            return Measurement(
                **common,
                verdict=Verdict.FAILED,
                low=low,
                high=high,
                reason=f"candidate worse by {worse_by:.4g}, at least {least:.4g} over the 95 % interval "
                f"(> {guardrail.threshold:g})",
            )
        return Measurement(
            **common,
            verdict=Verdict.SUCCESSFUL,
            low=low,
            high=high,
            reason=f"the 95 % interval allows a deficit within {guardrail.threshold:g} of the baseline",
        )
    if worse_by > guardrail.threshold:
        return Measurement(
            **common,
            verdict=Verdict.FAILED,
            low=low,
            high=high,
            reason=f"candidate worse by {worse_by:.4g} (> {guardrail.threshold:g})",
        )
    return Measurement(
        **common,
        verdict=Verdict.SUCCESSFUL,
        low=low,
        high=high,
        reason=f"within {guardrail.threshold:g} of the baseline",
    )


def tick_verdict(measurements: Sequence[Measurement]) -> Verdict:
    """Any failed guardrail fails the tick; otherwise any inconclusive one makes it inconclusive."""
    verdicts = {measurement.verdict for measurement in measurements}
    if Verdict.FAILED in verdicts:
        return Verdict.FAILED
    if Verdict.INCONCLUSIVE in verdicts:
        return Verdict.INCONCLUSIVE
    return Verdict.SUCCESSFUL


@dataclass(frozen=True)
class Decision:
    """What the release does after a tick: `rollback`, `pause`, `advance` (next stage or awaiting approval)
    or `wait`; with the consecutive counters to store."""

    action: str
    consecutive_failures: int
    consecutive_inconclusive: int


def decide(
    verdict: Verdict,
    *,
    consecutive_failures: int,
    consecutive_inconclusive: int,
    failure_limit: int,
    inconclusive_limit: int,
    stage_ready: bool,
) -> Decision:
    """Argo's limits: more than `failure_limit` failed ticks in a row rolls back; more than
    `inconclusive_limit` inconclusive ticks in a row pauses; a successful tick advances once the stage has
    run its minimum time (`stage_ready`), else waits."""
    if verdict == Verdict.FAILED:
        failures = consecutive_failures + 1
        return Decision("rollback" if failures > failure_limit else "wait", failures, 0)
    if verdict == Verdict.INCONCLUSIVE:
        inconclusive = consecutive_inconclusive + 1
        return Decision("pause" if inconclusive > inconclusive_limit else "wait", 0, inconclusive)
    return Decision("advance" if stage_ready else "wait", 0, 0)
