"""The catalogue of the control plane's signals (name, formula, unit, window, default threshold) and the small
formulas they share. Django-free: `apps.evolution.signals` reads the rows and calls these.

Every signal is computed over the policy's sliding window (`EvolutionPolicy.window_seconds`, ending at the
tick); a value is None when the window holds nothing to compute it from (no division by zero is ever
reported as 0)."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
SUCCESS_CUT = 0.5  # a trajectory succeeded when the mean of its rewards is at least this


@dataclass(frozen=True)
class SignalDoc:
    """What one signal means. `op`/`threshold`: the default rule a policy starts from (`op` ">" or "<"; the
    signal "fires" when value op threshold); None for the informational signals that never fire alone."""

    name: str
    formula: str
    unit: str
    window: str
    op: str | None = None
    threshold: float | None = None


_WINDOW = "the policy's window (window_seconds ending at the tick)"

SIGNALS: dict[str, SignalDoc] = {
    doc.name: doc
    for doc in (
        SignalDoc(
            "correction_rate",
            "trajectories with a critique reward from users / trajectories with any user reward",
            "share (0-1)",
            _WINDOW + "; rewards created in it",
            ">",
            0.2,
        ),
        SignalDoc(
            "thumbs_down_rate",
            "user boolean rewards of 0 (thumbs down) / user boolean rewards",
            "share (0-1)",
            _WINDOW + "; rewards created in it",
            ">",
            0.3,
        ),
        SignalDoc(
            "reward_mean",
            "mean of the values of every non-critique reward (details: mean and count by source)",
            "reward units",
            _WINDOW + "; rewards created in it",
            "<",
            0.5,
        ),
        SignalDoc(
            "reward_trend",
            "ordinary-least-squares slope of the non-critique reward values against their creation time "
            "(None with fewer than 3 rewards)",
            "reward units per hour",
            _WINDOW + "; rewards created in it",
            "<",
            -0.1,
        ),
        SignalDoc(
            "evaluator_score",
            "mean of the values of non-critique rewards whose source is `evaluator`",
            "reward units",
            _WINDOW + "; rewards created in it",
            "<",
            0.5,
        ),
        SignalDoc(
            "task_success",
            f"rewarded trajectories whose mean non-critique reward is >= {SUCCESS_CUT} / rewarded trajectories",
            "share (0-1)",
            _WINDOW + "; rewards created in it",
            "<",
            0.7,
        ),
        SignalDoc(
            "tool_failure_rate",
            "tool results that report a failure (a JSON object with an error/errors key, or text starting "
            "with error, exception, traceback, failed...) / tool results",
            "share (0-1)",
            _WINDOW + "; tool results observed in it",
            ">",
            0.1,
        ),
        SignalDoc(
            "cost_per_success",
            "cost (USD) of the window's steps of the traffic / successful trajectories (as task_success)",
            "USD per success",
            _WINDOW,
            ">",
            1.0,
        ),
        SignalDoc(
            "latency_p95_ms",
            "95th percentile (linear interpolation, workers.stats.percentile) of the latency of the "
            "model's llm_call steps",
            "milliseconds",
            _WINDOW,
            ">",
            10_000.0,
        ),
        SignalDoc(
            "safety_events",
            "steps with personal data detected or redacted, refusals (finish reason content_filter or "
            "refusal), and errors from a guardrail (pii, guardrail, blocked, content filter), each step "
            "once, x 100 / trajectories of the window",
            "events per 100 trajectories",
            _WINDOW,
            ">",
            5.0,
        ),
        SignalDoc(
            "drift_js",
            "largest Jensen-Shannon divergence (base 2) over the traffic features (tool mix, prompt-length "
            "bucket, first user message words, task-id prefix) between the window and the reference "
            "(production's training trajectories, else the window before production was promoted)",
            "divergence (0-1)",
            _WINDOW + " against the reference",
            ">",
            0.1,
        ),
        SignalDoc(
            "qualified_volume",
            "qualified trajectories of the traffic started since the production version was promoted "
            "(all of them when nothing is in production)",
            "trajectories",
            "since promotion (not windowed)",
            ">",
            200.0,
        ),
        SignalDoc(
            "staleness_versions",
            "newest version number of the policy's model - the production version's number",
            "versions",
            "now (not windowed)",
            ">",
            2.0,
        ),
        SignalDoc(
            "production_version",
            "the number of the version the `production` alias names (None: none)",
            "version number",
            "now (not windowed)",
        ),
    )
}


def rate(numerator: float, denominator: float) -> float | None:
    """numerator / denominator; None when the denominator is 0 (nothing to measure)."""
    return numerator / denominator if denominator else None


def per_hundred(count: float, total: float) -> float | None:
    """count per 100 of total; None when total is 0."""
    return 100.0 * count / total if total else None


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def share_at_least(values: Iterable[float], cut: float = SUCCESS_CUT) -> float | None:
    """The share of `values` that are >= `cut`; None without values."""
    values = list(values)
    return rate(sum(1 for value in values if value >= cut), len(values))


def trend(points: Sequence[tuple[float, float]]) -> float | None:
    """The ordinary-least-squares slope of (seconds, value) points, per hour: sum((t - t̄)(v - v̄)) /
    sum((t - t̄)²) x 3600. None with fewer than 3 points or when every point has the same time."""
    if len(points) < 3:
        return None
    count = len(points)
    mean_time = sum(time for time, _ in points) / count
    mean_value = sum(value for _, value in points) / count
    spread = sum((time - mean_time) ** 2 for time, _ in points)
    if spread == 0:
        return None
    covariance = sum((time - mean_time) * (value - mean_value) for time, value in points)
    return covariance / spread * SECONDS_PER_HOUR


def fires(name: str, value: float | None, rule: dict | None = None) -> bool:
    """Whether `value` crosses the rule (`{"op", "threshold"}`; the catalogue's default when None)."""
    doc = SIGNALS[name]
    op = (rule or {}).get("op", doc.op)
    threshold = (rule or {}).get("threshold", doc.threshold)
    if value is None or op is None or threshold is None:
        return False
    return value > threshold if op == ">" else value < threshold
