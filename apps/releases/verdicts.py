"""Guardrail verdicts in words: each guardrail's own name (two guardrails may watch one metric: a loose point
threshold and a strict 95 % interval, say), and the sentence a release page and its events show for a
measurement: what was compared (the metric of each arm, with its sample count, and which way is better), the
difference, the interval's bounds where one was computed, the threshold, and the verdict. The verdicts
themselves are `workers.evaluation.analysis.measure`'s; this module only says them."""

from workers.evaluation.analysis import Measurement, Verdict

METRIC_WORDS = {
    "reward_mean": "mean reward",
    "user_correction_rate": "user correction rate",
    "error_rate": "error rate",
    "latency_p95": "p95 latency (ms)",
    "cost_per_task": "cost per task",
    "eval_score": "eval score",
}


def guardrail_name(guardrail: dict) -> str:
    """A guardrail's name on the release page: its metric, judge and threshold, e.g. "reward_mean (point,
    worse by ≤ 0.25)" beside "reward_mean (95 % interval, worse by ≤ 0)"."""
    judge = "95 % interval" if guardrail.get("judge") == "interval" else "point"
    return f"{guardrail.get('metric')} ({judge}, worse by ≤ {float(guardrail.get('threshold', 0)):g})"


def _number(value) -> str:
    return "—" if value is None else f"{value:.4g}"


def _signed(value: float) -> str:
    return f"{value:+.4g}"


def measurement_explanation(measurement: Measurement, guardrail: dict) -> str:
    """The verdict of one guardrail in words (see the module's docstring)."""
    threshold = float(guardrail.get("threshold", 0))
    higher_is_better = guardrail.get("direction") == "higher_is_better"
    what = (
        f"{METRIC_WORDS.get(measurement.metric, measurement.metric)}: candidate "
        f"{_number(measurement.candidate)} (n={measurement.candidate_samples}) vs baseline "
        f"{_number(measurement.baseline)} (n={measurement.baseline_samples}), "
        f"{'higher' if higher_is_better else 'lower'} is better"
    )
    if (
        measurement.verdict == Verdict.INCONCLUSIVE
        or measurement.candidate is None
        or measurement.baseline is None
    ):
        needed = int(guardrail.get("min_samples", 30))
        return f"{what}; {needed} samples are needed per arm: inconclusive"
    difference = measurement.candidate - measurement.baseline
    worse_by = -difference if higher_is_better else difference
    gap = (
        f"the candidate is worse by {worse_by:.4g}"
        if worse_by > 0
        else f"the candidate is better by {-worse_by:.4g}"
        if worse_by < 0
        else "the arms are equal"
    )
    verdict = str(measurement.verdict)
    low, high = measurement.low, measurement.high
    bounds = (
        f"95 % interval of candidate − baseline [{_signed(low)}, {_signed(high)}]"
        if low is not None and high is not None
        else ""
    )
    if guardrail.get("judge") == "interval" and low is not None and high is not None:
        least = -high if higher_is_better else low
        if least > 0:
            shown = f"over the whole interval the candidate is worse by at least {least:.4g}"
        else:
            shown = "the interval includes no deficit at all"
        limit = "more than" if measurement.verdict == Verdict.FAILED else "not more than"
        return (
            f"{what}; {gap}; {bounds}: {shown}, {limit} the allowed deficit of {threshold:g} "
            f"(this judge fails a candidate only when the whole interval is worse by more than {threshold:g}): "
            f"{verdict}"
        )
    judged = (
        " (a p95 has no interval: judged on its point value)" if guardrail.get("judge") == "interval" else ""
    )
    limit = "more than" if measurement.verdict == Verdict.FAILED else "within"
    tail = f" ({bounds})" if bounds else ""
    return f"{what}; {gap}, {limit} the allowed deficit of {threshold:g}{tail}{judged}: {verdict}"
