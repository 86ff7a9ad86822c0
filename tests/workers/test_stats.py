"""workers.stats.percentile: the platform's one percentile (linear interpolation between nearest ranks)."""

import numpy
import pytest

from workers.stats import percentile


def test_interpolates_between_the_nearest_ranks():
    latencies = [10 * (i + 1) for i in range(20)]  # 10, 20, ..., 200
    assert percentile(latencies, 0.5) == 105.0  # halfway between the 10th and 11th values
    assert percentile(latencies, 0.95) == pytest.approx(190.5)  # position 18.05
    assert percentile([1, 2, 3, 4], 0.25) == 1.75


def test_order_does_not_matter_and_the_result_is_a_float():
    assert percentile([3, 1, 2], 0.5) == 2.0
    assert isinstance(percentile([3, 1, 2], 0.5), float)
    assert percentile(iter([5.0, 1.0]), 1.0) == 5.0


def test_ends_are_the_smallest_and_largest_values():
    values = [7.5, -2.0, 3.0]
    assert percentile(values, 0.0) == -2.0
    assert percentile(values, 1.0) == 7.5
    assert percentile([42], 0.99) == 42.0


def test_no_values_give_none():
    assert percentile([], 0.5) is None
    assert percentile(iter(()), 0.95) is None


@pytest.mark.parametrize("fraction", [-0.01, 1.01, 95])
def test_a_fraction_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(ValueError, match="between 0 and 1"):
        percentile([1.0, 2.0], fraction)


def test_matches_numpy_linear_on_random_samples():
    rng = numpy.random.default_rng(7)
    for size in (1, 2, 5, 101, 1000):
        samples = rng.normal(size=size).tolist()
        for fraction in (0.0, 0.025, 0.5, 0.95, 0.975, 0.99, 1.0):
            assert percentile(samples, fraction) == float(numpy.percentile(samples, fraction * 100))
