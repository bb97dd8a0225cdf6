"""Input patterns shared by all operations.

Each pattern is chosen to expose a different class of bug: `normal` the ordinary case,
`zeros` divisions and missing epsilons, `small` values near the epsilon where it matters,
`alternating` cancellation in sums. Arrays are FP32, seeded, and deterministic.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

PATTERNS = ("normal", "zeros", "small", "alternating")


def rng_for(*parts: object) -> np.random.Generator:
    """A generator seeded from the case's name, so each case has its own fixed data."""
    return np.random.default_rng(zlib.crc32("/".join(str(p) for p in parts).encode()))


def pattern_array(pattern: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if pattern == "normal":
        values = rng.standard_normal(shape)
    elif pattern == "zeros":
        values = np.zeros(shape)
    elif pattern == "small":
        values = 1e-3 * rng.standard_normal(shape)
    elif pattern == "alternating":
        signs = np.where(np.indices(shape).sum(axis=0) % 2 == 0, 1.0, -1.0)
        values = signs * (1.0 + 0.5 * rng.random(shape))
    else:
        raise ValueError(f"input pattern '{pattern}' is not defined; allowed: {', '.join(PATTERNS)}")
    return np.ascontiguousarray(values, dtype=np.float32)


def timing_inputs(spec: Any, shape_text: str) -> dict[str, np.ndarray]:
    """The timing pattern's host inputs for one shape of a kernel (a spec.KernelSpec): the same
    arrays for every layout and process that times or spans it."""
    shape = spec.parse_shape(shape_text)
    return spec.make_inputs(shape, spec.timing_pattern, rng_for(spec.name, shape_text, spec.timing_pattern))
