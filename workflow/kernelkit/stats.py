"""Statistics of timing samples: medians and ranges within a run; between runs, B/A with a bootstrap
that resamples whole processes before samples, because two processes' medians on the H200 can lie
further apart than the samples inside either."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Any, Sequence

import numpy as np

from kernelkit.config_file import schema_default

# Defaults of a comparison of two runs, written once, in the schema (diff.threshold, diff.confidence).
DIFF_THRESHOLD = schema_default("diff", "threshold")
DIFF_CONFIDENCE = schema_default("diff", "confidence")


@dataclass(frozen=True)
class SampleSummary:
    n: int
    median: float
    min: float
    max: float


def summarize(samples: Sequence[float]) -> SampleSummary:
    if not samples:
        raise ValueError("no samples to summarize")
    return SampleSummary(n=len(samples), median=float(median(samples)), min=float(min(samples)), max=float(max(samples)))


@dataclass(frozen=True)
class RatioInterval:
    ratio: float
    low: float
    high: float


# Bootstrap work bounds: at most this many draws per process (m-out-of-n, which only widens the
# interval), in chunks of at most this many values, so memory stays near 32 MB whatever a record holds.
MAX_DRAWS_PER_PROCESS = 2000
CHUNK_VALUES = 4_000_000


def _resampled_medians(groups: Sequence[Sequence[float]], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Median of the pooled samples after picking processes, then samples, with replacement."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    draws_of = np.minimum([len(g) for g in arrays], MAX_DRAWS_PER_PROCESS)
    width = int(draws_of.max())
    chunk = max(1, CHUNK_VALUES // (len(arrays) * width))
    medians = np.empty(resamples)
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        picked = rng.integers(0, len(arrays), size=(count, len(arrays)))
        values = np.full((count, len(arrays), width), np.nan)
        for slot in range(len(arrays)):
            for group, array in enumerate(arrays):
                rows = np.nonzero(picked[:, slot] == group)[0]
                if rows.size:
                    drawn = rng.integers(0, len(array), size=(rows.size, draws_of[group]))
                    values[rows, slot, : draws_of[group]] = array[drawn]
        medians[start:start + count] = np.nanmedian(values.reshape(count, -1), axis=1)
    return medians


def ratio_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], confidence: float = 0.95,
                   resamples: int = 4000, seed: int = 0) -> RatioInterval:
    """B/A of the pooled medians and its percentile bootstrap interval; each side lists its processes' samples."""
    if not a or not b or not all(a) or not all(b):
        raise ValueError("each side needs at least one process with samples")
    rng = np.random.default_rng(seed)
    ratios = _resampled_medians(b, resamples, rng) / _resampled_medians(a, resamples, rng)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    point = float(np.median(np.concatenate(b))) / float(np.median(np.concatenate(a)))
    return RatioInterval(point, float(low), float(high))


def bonferroni(confidence: float, rows: int) -> float:
    """Each row's confidence, so that a table of `rows` intervals holds `confidence` as a whole."""
    return 1.0 - (1.0 - confidence) / rows


def process_order(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> int:
    """+1 when every process median of B lies above every one of A, -1 when below, 0 when they interleave."""
    medians_a, medians_b = [median(g) for g in a], [median(g) for g in b]
    return 1 if min(medians_b) > max(medians_a) else -1 if max(medians_b) < min(medians_a) else 0


def verdict(interval: RatioInterval, threshold: float, order: int) -> str:
    """SAME inside 1 +- threshold; SLOWER (FASTER) wholly beyond it with every process of B slower (faster)
    than every one of A; else AMBIGUOUS. A fresh process can run a kernel 2% slower for its whole life
    (h200-s5a vs h200-s5b, identical code), which two or three processes a side cannot show."""
    if interval.low >= 1.0 - threshold and interval.high <= 1.0 + threshold:
        return "SAME"
    if interval.low > 1.0 + threshold and order > 0:
        return "SLOWER"
    if interval.high < 1.0 - threshold and order < 0:
        return "FASTER"
    return "AMBIGUOUS"


def median_relative_halfwidth(samples: Sequence[float], z: float = 1.96) -> float:
    """Half the width of a distribution-free ~95% interval of the median, over the median: the
    order statistics n/2 -+ z sqrt(n)/2 (binomial approximation) assume nothing of the samples' shape."""
    ordered = sorted(samples)
    n = len(ordered)
    if n < 2:
        return float("inf")
    low = max(0, math.floor(n / 2 - z * math.sqrt(n) / 2))
    high = min(n - 1, math.ceil(n / 2 + z * math.sqrt(n) / 2))
    centre = median(ordered)
    return (ordered[high] - ordered[low]) / 2 / centre if centre else float("inf")


def placement_medians(samples: Sequence[float], sample_placement: Sequence[int] | None) -> list[float]:
    """The median of each buffer placement's samples, in placement order (one for files without)."""
    if not sample_placement:
        return [median(samples)]
    groups: dict[int, list[float]] = {}
    for value, index in zip(samples, sample_placement, strict=True):
        groups.setdefault(index, []).append(value)
    return [median(groups[index]) for index in sorted(groups)]


def geometric_mean(ratios: Sequence[float]) -> float:
    """The mean of ratios on a log scale, where 2x slower and 2x faster cancel out (an arithmetic
    mean of 2.0 and 0.5 would say 1.25x slower)."""
    if not ratios or min(ratios) <= 0:
        raise ValueError("a geometric mean needs at least one ratio, each above zero")
    return math.exp(sum(map(math.log, ratios)) / len(ratios))


def relative_range(values: Sequence[float]) -> float:
    """(max - min) / min: how much slower the slowest is than the fastest."""
    return max(values) / min(values) - 1.0


# Two timings of the same work agree within the diff threshold (2%); so must a kernel and its ceiling.
CEILING_TOLERANCE = 0.02


def rates(records: dict[str, dict[str, Any]]) -> dict[str, float]:
    """copy and l2 GB/s, gemm GFLOP/s and the floor in us, from the medians of the ceiling targets."""
    found = {f"{kind}_{unit}": records[kind][work] / (median(records[kind]["samples_us"]) * 1e-6) / 1e9
             for kind, work, unit in (("copy", "bytes", "gb_s"), ("l2", "bytes", "gb_s"), ("gemm", "flops", "gflop_s"))
             if kind in records}
    return found | ({"floor_us": median(records["floor"]["samples_us"])} if "floor" in records else {})


def near_floor(median_us: float, floor_us: float | None, factor: float = 3.0) -> bool:
    """A timing within `factor` times the empty kernel's cost measures the harness as much as the kernel."""
    return floor_us is not None and median_us < factor * floor_us
