"""Summary statistics shared by the apps, the workers and the benchmarks. Django-free.

One percentile for the whole platform (dashboard latency, canary guardrails, bootstrap intervals,
benchmarks), so that the same samples give the same number wherever they are summarized.
"""

from collections.abc import Iterable

import numpy


def percentile(values: Iterable[float], fraction: float) -> float | None:
    """The `fraction` quantile (0 to 1: 0.5 is the median, 0.95 the 95th percentile) of `values`, in any order,
    by linear interpolation between the two nearest ranks: the value at position `fraction × (n − 1)` of the
    ascending values, interpolated between its neighbours (numpy's `method="linear"`, R's type 7, Excel's
    PERCENTILE.INC). It never leaves the range of the values: 0 gives the smallest, 1 the largest.
    None when there are no values; a fraction outside 0..1 raises ValueError."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
    samples = numpy.fromiter(values, dtype=float)
    if samples.size == 0:
        return None
    return float(numpy.quantile(samples, fraction, method="linear"))
