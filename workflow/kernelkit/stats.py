"""Statistics of timing samples, kept small and exact.

Medians and ranges only for now: with 15 samples per target, the median is robust to the
occasional preempted replay and the min/max show the spread without a model behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence


@dataclass(frozen=True)
class SampleSummary:
    n: int
    median: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        """(max - min) / median: how far apart the samples of one process lie."""
        return (self.max - self.min) / self.median if self.median else float("inf")


def summarize(samples: Sequence[float]) -> SampleSummary:
    if not samples:
        raise ValueError("no samples to summarize")
    return SampleSummary(n=len(samples), median=float(median(samples)), min=float(min(samples)), max=float(max(samples)))
