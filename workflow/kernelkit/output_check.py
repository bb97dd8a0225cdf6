"""The judgement of one correctness launch from the raw uint32 bits of [guard | output | guard],
all filled with a sentinel NaN before it: every output element written, finite and within
tolerance, and no guard element changed. Plain NumPy, so it is tested on the CPU."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.spec import Tolerance

# A signalling NaN with a recognisable payload: kernels produce quiet NaNs (0x7fc00000 and
# up) or finite values, never these bits, so "still the sentinel" means "never written".
SENTINEL_BITS = np.uint32(0x7FA5A5A5)
GUARD_ELEMENTS = 1024


def check_case(bits: np.ndarray, reference: np.ndarray, tolerance: Tolerance, guard: int = GUARD_ELEMENTS,
               scale: np.ndarray | None = None) -> dict[str, Any]:
    """Judge one launch: an element passes when |out - ref| <= abs + rel * scale (scale: |ref|
    unless the spec gives KernelSpec.error_scale)."""
    bits = np.asarray(bits, dtype=np.uint32)
    body_bits = bits[guard : bits.size - guard]
    guard_bits = np.concatenate([bits[:guard], bits[bits.size - guard :]])
    reference = np.asarray(reference, dtype=np.float64).reshape(-1)
    if body_bits.size != reference.size:
        raise ValueError(f"output holds {body_bits.size} elements, the reference {reference.size}")
    with np.errstate(invalid="ignore"):  # widening the signalling-NaN sentinel raises "invalid"
        out = body_bits.view(np.float32).astype(np.float64)

    sentinel = body_bits == SENTINEL_BITS
    finite = np.isfinite(out)
    abs_error = np.where(finite, np.abs(out - reference), np.inf)
    magnitude = np.abs(reference) if scale is None else np.asarray(scale, dtype=np.float64).reshape(-1)
    allowed = tolerance.abs + tolerance.rel * magnitude
    bad = ~(abs_error <= allowed)
    nonzero_reference = finite & (reference != 0)
    rel_error = np.divide(abs_error, np.abs(reference), out=np.zeros_like(abs_error), where=nonzero_reference)

    counts = {
        "guard_overwritten": int(np.count_nonzero(guard_bits != SENTINEL_BITS)),
        "sentinel_left": int(np.count_nonzero(sentinel)),
        "nonfinite": int(np.count_nonzero(~finite & ~sentinel)),
        "out_of_tolerance": int(np.count_nonzero(bad)),
    }
    finite_errors = abs_error[finite]
    # Worst = furthest beyond its own allowance; unwritten and non-finite elements rank first.
    worst = int(np.argmax(abs_error / allowed)) if abs_error.size else 0
    symptom = _symptom(counts, out, sentinel)
    return {
        "passed": symptom == "none",
        "symptom": symptom,
        "max_abs_error": float(finite_errors.max()) if finite_errors.size else 0.0,
        "max_rel_error": float(rel_error.max()) if rel_error.size else 0.0,
        "worst_flat_index": worst,
        "elements": int(reference.size),
        **counts,
    }


def _symptom(counts: Mapping[str, int], out: np.ndarray, sentinel: np.ndarray) -> str:
    """The first thing a reader should hear about a failing case."""
    if counts["guard_overwritten"]:
        return f"{counts['guard_overwritten']} guard elements overwritten"
    if counts["sentinel_left"]:
        return f"sentinel left in {counts['sentinel_left']} output elements"
    if counts["nonfinite"]:
        nan = int(np.count_nonzero(np.isnan(out) & ~sentinel))
        return f"NaN in {nan} and Inf in {counts['nonfinite'] - nan} output elements"
    if counts["out_of_tolerance"]:
        return f"error above tolerance in {counts['out_of_tolerance']} output elements"
    return "none"
