"""The between-run statistics on synthetic samples whose answer is known."""

from __future__ import annotations

from statistics import median

import numpy as np
import pytest

from kernelkit.stats import RatioInterval, geometric_mean, process_order, ratio_interval, summarize, verdict


def processes(center: float, noise: float, count: int = 2, n: int = 15, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(center + rng.normal(0, noise, n)) for _ in range(count)]


def test_summary_of_samples():
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.n, s.median, s.min, s.max) == (4, 2.5, 1.0, 10.0)
    with pytest.raises(ValueError):
        summarize([])


def judge(a, b, **kwargs):
    interval = ratio_interval(a, b, **kwargs)
    return interval, verdict(interval, 0.02, process_order(a, b))


def test_identical_distributions_are_same():
    interval, called = judge(processes(100, 0.3, seed=1), processes(100, 0.3, seed=2), confidence=0.997)
    assert interval.low < 1 < interval.high
    assert called == "SAME"


@pytest.mark.parametrize("factor, expected", [(1.10, "SLOWER"), (0.90, "FASTER")])
def test_a_ten_percent_shift_is_detected(factor, expected):
    interval, called = judge(processes(100, 0.3, seed=1), processes(100 * factor, 0.3, seed=2), confidence=0.997)
    assert interval.ratio == pytest.approx(factor, rel=0.01)
    assert interval.low <= factor <= interval.high
    assert called == expected


def test_a_wide_noisy_pair_is_ambiguous():
    interval, called = judge(processes(100, 25, seed=3), processes(100, 25, seed=4))
    assert interval.high - interval.low > 0.1
    assert called == "AMBIGUOUS"


def test_one_slow_process_is_not_called_slower():
    # Samples inside each process agree to 0.1%, but B's two processes disagree by 10%:
    # resampling processes must widen the interval instead of declaring a change.
    a = processes(100, 0.1, seed=5)
    b = [a[1], processes(110, 0.1, count=1, seed=7)[0]]  # one process like A's, one 10% slower
    interval, called = judge(a, b)
    assert interval.low <= 1.0 + 1e-3 and interval.high >= 1.09
    assert process_order(a, b) == 0
    assert called == "AMBIGUOUS"


def test_interval_is_reproducible_with_its_seed():
    a, b = processes(50, 1, seed=8), processes(51, 1, seed=9)
    assert ratio_interval(a, b, seed=3) == ratio_interval(a, b, seed=3)


@pytest.mark.parametrize(
    "low, high, order, expected",
    [(0.99, 1.01, 0, "SAME"), (0.98, 1.02, 1, "SAME"), (1.025, 1.06, 1, "SLOWER"), (1.025, 1.06, 0, "AMBIGUOUS"),
     (0.95, 0.975, -1, "FASTER"), (0.95, 0.975, 1, "AMBIGUOUS"), (0.97, 1.05, 1, "AMBIGUOUS"), (1.001, 1.015, 1, "SAME"),
     # Beyond 1 but not wholly beyond the threshold: a change SAME would tolerate is not claimed.
     (1.005, 1.03, 1, "AMBIGUOUS"), (0.9636, 0.9922, -1, "AMBIGUOUS")],
)
def test_verdict_boundaries(low, high, order, expected):
    assert verdict(RatioInterval((low + high) / 2, low, high), 0.02, order) == expected


def test_placement_medians_group_samples_by_their_placement():
    from kernelkit.stats import placement_medians, relative_range

    samples = [113.0, 111.0, 112.0, 91.0, 92.0, 90.0, 95.0, 95.5, 94.5]
    medians = placement_medians(samples, [0, 0, 0, 1, 1, 1, 2, 2, 2])
    assert medians == [112.0, 91.0, 95.0]
    assert relative_range(medians) == pytest.approx(112.0 / 91.0 - 1)
    # Files written before placements existed hold one placement: the median of every sample.
    assert placement_medians(samples, None) == [median(samples)]
    with pytest.raises(ValueError):
        placement_medians(samples, [0, 1])


def test_geometric_mean_weighs_twice_as_slow_and_twice_as_fast_alike():
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([1.017]) == pytest.approx(1.017)
    for bad in ([], [1.0, 0.0], [-1.0]):
        with pytest.raises(ValueError):
            geometric_mean(bad)
