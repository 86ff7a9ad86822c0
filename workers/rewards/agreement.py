"""Inter-annotator agreement. Pure: Cohen's kappa for two annotators; Krippendorff's alpha for any number,
with missing values, at the nominal or interval level."""

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence


def cohen_kappa(pairs: Sequence[tuple[Hashable, Hashable]]) -> float | None:
    """κ = (p_o − p_e) / (1 − p_e) over items both annotators labelled. None: no items, or chance agreement
    is total (both gave one and the same category everywhere), where κ is undefined."""
    if not pairs:
        return None
    count = len(pairs)
    observed = sum(1 for first, second in pairs if first == second) / count
    first_marginals = Counter(first for first, _ in pairs)
    second_marginals = Counter(second for _, second in pairs)
    expected = (
        sum(first_marginals[category] * second_marginals[category] for category in first_marginals) / count**2
    )
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def _distance(level: str):
    if level == "nominal":
        return lambda first, second: 0.0 if first == second else 1.0
    if level == "interval":
        return lambda first, second: float(first - second) ** 2
    raise ValueError(f"unknown level {level!r}: nominal or interval")


def krippendorff_alpha(units: Sequence[Sequence[Hashable]], level: str = "nominal") -> float | None:
    """α = 1 − D_o / D_e from the coincidence matrix. `units`: per unit, the values the annotators gave
    (missing ones left out); units with fewer than two values are not pairable and are ignored. None:
    nothing pairable, or no variation at all (D_e = 0)."""
    delta = _distance(level)
    coincidences: defaultdict[tuple[Hashable, Hashable], float] = defaultdict(float)
    for values in units:
        pairable = len(values)
        if pairable < 2:
            continue
        for i, first in enumerate(values):
            for j, second in enumerate(values):
                if i != j:
                    coincidences[(first, second)] += 1 / (pairable - 1)
    marginals: defaultdict[Hashable, float] = defaultdict(float)
    for (first, _), weight in coincidences.items():
        marginals[first] += weight
    total = sum(marginals.values())
    if total <= 1:
        return None
    observed = sum(weight * delta(first, second) for (first, second), weight in coincidences.items()) / total
    expected = sum(
        marginals[first] * marginals[second] * delta(first, second)
        for first in marginals
        for second in marginals
    ) / (total * (total - 1))
    if expected == 0:
        return None
    return 1 - observed / expected
