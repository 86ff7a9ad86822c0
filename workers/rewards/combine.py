"""How several reward sources combine into one training reward. Pure."""

from dataclasses import dataclass, field
from datetime import datetime

DEFAULT_PRIORITY = ("annotator", "user", "evaluator", "environment", "rule", "agent")


@dataclass(frozen=True)
class RewardPoint:
    value: float
    source: str
    created_at: datetime
    is_override: bool = False


@dataclass(frozen=True)
class CombinationRule:
    """`priority`: the first source (in order) that has rewards decides, by the mean of its values;
    sources not listed are not trusted for training. `weighted_sum`: Σ weight × mean over the weighted
    sources that have rewards. Either way an operator's override (the newest) beats everything."""

    mode: str = "priority"
    priority: tuple[str, ...] = DEFAULT_PRIORITY
    weights: dict[str, float] = field(default_factory=dict)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def combine(points: list[RewardPoint], rule: CombinationRule) -> float | None:
    """The training reward, or None when no trusted source has given one."""
    overrides = [point for point in points if point.is_override]
    if overrides:
        return max(overrides, key=lambda point: point.created_at).value
    by_source: dict[str, list[float]] = {}
    for point in points:
        by_source.setdefault(point.source, []).append(point.value)
    if rule.mode == "weighted_sum":
        weighted = [
            (weight, by_source[source]) for source, weight in rule.weights.items() if by_source.get(source)
        ]
        if not weighted:
            return None
        return sum(weight * _mean(values) for weight, values in weighted)
    for source in rule.priority:
        if by_source.get(source):
            return _mean(by_source[source])
    return None
