"""Checking a reward against its spec. Pure: takes and returns plain values, never touches Django."""

import math
from dataclasses import dataclass, field

SCORED_KINDS = ("numeric", "boolean", "categorical")


@dataclass(frozen=True)
class SpecData:
    name: str
    kind: str  # numeric, boolean, categorical, critique
    minimum: float | None = None
    maximum: float | None = None
    categories: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Checked:
    """A reward that fits its spec (value mapped, label filled) or the reason it does not."""

    value: float
    label: str
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


def spec_problems(spec: SpecData) -> dict[str, str]:
    """What is wrong with a spec definition itself, by field (empty: valid)."""
    problems = {}
    if spec.kind not in (*SCORED_KINDS, "critique"):
        problems["kind"] = "must be numeric, boolean, categorical or critique"
    for name in ("minimum", "maximum"):
        bound = getattr(spec, name)
        if bound is not None and not math.isfinite(bound):
            problems[name] = "must be a finite number"
    if spec.minimum is not None and spec.maximum is not None and spec.minimum > spec.maximum:
        problems["maximum"] = "must not be below minimum"
    if spec.kind == "categorical":
        if not spec.categories:
            problems["categories"] = "a categorical spec needs at least one {label: value}"
        elif not all(
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            for value in spec.categories.values()
        ):
            problems["categories"] = "every category needs a finite numeric value"
    elif spec.categories:
        problems["categories"] = "only categorical specs have categories"
    return problems


def check_reward(spec: SpecData, *, kind: str, value: float | None, label: str = "") -> Checked:
    """Maps and checks one incoming reward. Categorical: a label is mapped to its value, a bare value
    must be one of the category values (its label is filled in). Boolean: 0 or 1. Numeric: within
    [minimum, maximum]. Critique: any value, label (the text) required."""
    named = f"reward spec {spec.name!r}"
    if (kind == "critique") != (spec.kind == "critique"):
        return Checked(value or 0.0, label, f"a {kind} reward does not fit {named} (kind {spec.kind})")
    if spec.kind == "critique":
        if not label.strip():
            return Checked(value or 0.0, label, f"{named} is a critique: give its text as label")
        return Checked(0.0 if value is None else value, label)
    if spec.kind == "categorical":
        if label:
            if label not in spec.categories:
                known = ", ".join(sorted(spec.categories))
                return Checked(value or 0.0, label, f"unknown category {label!r} for {named}; known: {known}")
            mapped = float(spec.categories[label])
            if value is not None and value != mapped:
                return Checked(value, label, f"category {label!r} of {named} has value {mapped}, not {value}")
            return Checked(mapped, label)
        matches = [name for name, mapped in spec.categories.items() if value is not None and mapped == value]
        if value is None or not matches:
            return Checked(value or 0.0, label, f"value {value} is not a category value of {named}")
        return Checked(float(value), matches[0])
    if value is None:
        return Checked(0.0, label, f"{named} needs a value")
    if spec.kind == "boolean" and value not in (0, 1):
        return Checked(value, label, f"value {value} is out of range for {named}: boolean takes 0 or 1")
    if spec.minimum is not None and value < spec.minimum or spec.maximum is not None and value > spec.maximum:
        low = "-inf" if spec.minimum is None else spec.minimum
        high = "inf" if spec.maximum is None else spec.maximum
        return Checked(value, label, f"value {value} is out of range [{low}, {high}] for {named}")
    return Checked(float(value), label)


def rating_options(spec: SpecData) -> list[tuple[str, float]]:
    """The choices an annotator gets on number keys 1..n, as (label, value)."""
    if spec.kind == "boolean":
        return [("yes", 1.0), ("no", 0.0)]
    if spec.kind == "categorical":
        return [(name, float(value)) for name, value in spec.categories.items()][:9]
    if spec.kind == "numeric":
        low = 0.0 if spec.minimum is None else spec.minimum
        high = 1.0 if spec.maximum is None else spec.maximum
        if float(low).is_integer() and float(high).is_integer() and 2 <= high - low <= 8:
            return [(f"{int(v)}", float(v)) for v in range(int(low), int(high) + 1)]
        return [(f"{low + (high - low) * step / 4:g}", low + (high - low) * step / 4) for step in range(5)]
    return []
