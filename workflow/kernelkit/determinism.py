"""Determinism without a tool: every correctness case is launched several times on a freshly
filled output buffer, and the raw bits must agree exactly: races often give right answers, but
rarely the same bits every time. Layouts declared `nondeterministic` are recorded, not failed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

DIFFER_SYMPTOM = "results differ between identical launches (race or uninitialised read)"


def compare_launches(bit_arrays: Sequence[np.ndarray]) -> dict[str, Any]:
    """How many elements differ anywhere among repeated launches' raw uint32 outputs."""
    first = np.asarray(bit_arrays[0], dtype=np.uint32)
    differing = np.zeros(first.shape, dtype=bool)
    for other in bit_arrays[1:]:
        other = np.asarray(other, dtype=np.uint32)
        if other.shape != first.shape:
            raise ValueError(f"launch outputs of {first.shape} and {other.shape} elements cannot be compared")
        differing |= other != first
    count = int(np.count_nonzero(differing))
    return {"deterministic": count == 0, "launches": len(bit_arrays), "differing_elements": count}


def judge(verdict: dict[str, Any], comparison: dict[str, Any], exempt_reason: str | None) -> dict[str, Any]:
    """The case verdict with the determinism result folded in: a failed case keeps its symptom."""
    judged = {**verdict, **comparison, "nondeterministic_reason": exempt_reason or ""}
    if not comparison["deterministic"] and not exempt_reason and verdict["passed"]:
        judged.update(passed=False, symptom=DIFFER_SYMPTOM)
    return judged


def summarize(cases: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Determinism over correctness cases; None when no case was launched more than once."""
    repeated = [case for case in cases if case.get("launches", 1) > 1]
    if not repeated:
        return None
    return {
        "cases": len(repeated),
        "launches": sorted({case["launches"] for case in repeated}),
        "differing": [f"{c['kernel']} {c['layout']} {c['shape']} {c['pattern']}" for c in repeated if not c["deterministic"]],
        "exempt": sorted({f"{c['kernel']} {c['layout']}: {c['nondeterministic_reason']}" for c in repeated
                          if c.get("nondeterministic_reason")}),
    }
