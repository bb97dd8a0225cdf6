"""Correctness of one kernel layout against its float64 reference.

Each case fills the output, and guard regions on both sides of it, with a sentinel NaN
whose bit pattern no arithmetic produces, launches once, and then demands that every
output element was overwritten with a finite value within tolerance and that no guard
element changed. The check itself (`check_case`) is plain NumPy so it is tested on the CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import rng_for
from kernelkit.spec import KernelSpec, Shape, Tolerance, shape_name

# A signalling NaN with a recognisable payload: kernels produce quiet NaNs (0x7fc00000 and
# up) or finite values, never these bits, so "still the sentinel" means "never written".
SENTINEL_BITS = np.uint32(0x7FA5A5A5)
GUARD_ELEMENTS = 1024


@dataclass
class CaseResult:
    kernel: str
    layout: str
    shape: str
    pattern: str
    passed: bool
    symptom: str
    max_abs_error: float
    max_rel_error: float
    worst_index: list[int]
    elements: int
    out_of_tolerance: int
    nonfinite: int
    sentinel_left: int
    guard_overwritten: int


def check_case(
    bits: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    guard: int = GUARD_ELEMENTS,
    scale: np.ndarray | None = None,
) -> dict[str, Any]:
    """Judge one launch from the raw uint32 bits of [guard | output | guard].

    An element passes when |out - ref| <= abs + rel * scale, where scale is |ref| unless the
    spec gives the magnitude its rounding error grows with (see KernelSpec.error_scale).
    """
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


def run_case(spec: KernelSpec, kernel: Any, layout_name: str, shape: Shape, pattern: str) -> CaseResult:
    """One launch (or one library call, whose result is copied in) on the GPU, judged by `check_case`."""
    from kernelkit import device

    cp = device.cupy()
    host_inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
    buffers = device.upload(host_inputs)
    # The reference starts from the exact FP32 values that sit on the device.
    on_device = {name: device.download(array) for name, array in buffers.items()}
    reference = spec.reference(on_device)
    out_shape = spec.output_shape(shape)
    elements = int(np.prod(out_shape))

    padded = cp.empty(GUARD_ELEMENTS + elements + GUARD_ELEMENTS, dtype=cp.uint32)
    padded.fill(int(SENTINEL_BITS))
    out = padded[GUARD_ELEMENTS : GUARD_ELEMENTS + elements].view(cp.float32).reshape(out_shape)
    if spec.is_baseline(layout_name):
        from kernelkit import library

        result = library.as_cupy(spec.baselines[layout_name].make_call(buffers, shape)())
        # A result of another shape or type is not copied: its case then fails as unwritten.
        if result.dtype == cp.float32 and tuple(result.shape) == tuple(out_shape):
            out[...] = result
    else:
        launch_once, _ = device.launcher(spec, kernel, spec.layout(layout_name), shape, buffers, out)
        launch_once()
    cp.cuda.Device().synchronize()

    scale = spec.error_scale(on_device) if spec.error_scale else None
    verdict = check_case(device.download(padded), reference, spec.tolerance, scale=scale)
    worst_index = [int(i) for i in np.unravel_index(verdict.pop("worst_flat_index"), out_shape)]
    return CaseResult(
        kernel=spec.name, layout=layout_name, shape=shape_name(shape), pattern=pattern, worst_index=worst_index, **verdict
    )


def run_suite(spec: KernelSpec, layouts: list[str], mutation: str | None = None) -> list[CaseResult]:
    """Every correctness shape x pattern for each layout, with the (possibly mutated) source."""
    from kernelkit import device

    def build(layout: str) -> tuple[str, tuple[str, ...]]:
        return spec.entry_of(layout), spec.compile_options_of(layout)

    builds = {build(layout) for layout in layouts if not spec.is_baseline(layout)}
    compiled = {key: device.compile_kernel(spec, mutation, *key) for key in sorted(builds)}
    return [
        run_case(spec, None if spec.is_baseline(layout) else compiled[build(layout)], layout, shape, pattern)
        for layout in layouts
        for shape in spec.correctness_shapes
        for pattern in spec.patterns
    ]


def suite_record(spec: KernelSpec, cases: list[CaseResult], mutation: str | None = None) -> dict[str, Any]:
    """The JSON body shared by correctness and control files."""
    failed = [case for case in cases if not case.passed]
    return {
        "kernel": spec.name,
        "source_sha256": spec.source_sha256(mutation),
        "compile_options": list(spec.compile_options),
        # Layouts whose parameters add options (tile sizes as -D...) were built with these.
        "layout_compile_options": {
            layout: list(spec.compile_options_of(layout))
            for layout in dict.fromkeys(case.layout for case in cases)
            if not spec.is_baseline(layout) and spec.compile_options_of(layout) != tuple(spec.compile_options)
        },
        "tolerance": asdict(spec.tolerance),
        "cases": [asdict(case) for case in cases],
        "case_count": len(cases),
        "failed_count": len(failed),
        "max_abs_error": max((case.max_abs_error for case in cases), default=0.0),
    }
