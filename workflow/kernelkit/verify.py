"""Verification at the timed shape: the timed configuration's own output, once, against float64.

The correctness cases stop at small sizes; a kernel whose error appears only beyond them would
pass every check and be timed, wrong. So every timed target and span launches once on the timed
inputs, untimed, and compares with the spec's float64 reference, on the GPU where it runs there,
else on the CPU up to CPU_REFERENCE_MAX_ELEMENTS. `compare` is tested on the CPU.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from kernelkit import KitError
from kernelkit.spec import KernelSpec, Shape, Tolerance

# A float64 reference of 2^24 output elements takes seconds on one CPU core; larger ones are not tried.
CPU_REFERENCE_MAX_ELEMENTS = 1 << 24
# Up to these, NumPy takes milliseconds, while loading CuPy's kernels took 0.3-0.4 s (H200).
SMALL_REFERENCE_ELEMENTS = 1 << 20
SMALL_REFERENCE_FLOPS = 1 << 24
CPU_SMALL = "float64 on CPU for a small shape"


def compare(out: Any, reference: Any, tolerance: Tolerance, scale: Any = None) -> dict[str, Any]:
    """How many elements of `out` miss |out - ref| <= abs + rel * scale (scale: |ref| unless given);
    NaN and Inf never pass. `out`, `reference` and `scale` are all NumPy or all CuPy arrays."""
    from kernelkit.library import array_module

    xp = array_module(out)
    out64 = out.astype(xp.float64).reshape(-1)
    ref = reference.astype(xp.float64).reshape(-1)
    if out64.size != ref.size:
        raise ValueError(f"output holds {out64.size} elements, the reference {ref.size}")
    finite = xp.isfinite(out64)
    error = xp.where(finite, xp.abs(out64 - ref), xp.inf)
    magnitude = xp.abs(ref) if scale is None else scale.astype(xp.float64).reshape(-1)
    bad = ~(error <= tolerance.abs + tolerance.rel * magnitude)
    finite_error = error[finite]
    return {
        "elements": int(ref.size),
        "mismatched": int(xp.count_nonzero(bad)),
        "nonfinite": int(xp.count_nonzero(~finite)),
        "max_abs_error": float(finite_error.max()) if finite_error.size else 0.0,
        "passed": not bool(bad.any()),
        "tolerance": {"abs": tolerance.abs, "rel": tolerance.rel, "scale": "|reference|" if scale is None else "error_scale"},
    }


def failure_sentence(kernel: str, shape: str, layout: str, verdict: Mapping[str, Any]) -> str:
    nonfinite = f", {verdict['nonfinite']} of them NaN or Inf" if verdict["nonfinite"] else ""
    return (f"{kernel} {shape} {layout}: output at the timed shape differs from the float64 reference in "
            f"{verdict['mismatched']} of {verdict['elements']} elements{nonfinite} (max |err| {verdict['max_abs_error']:.3e}); "
            "nothing timed")


# `compare` in one pass on the GPU, instead of a dozen CuPy kernels each loaded under the GPU lock.
COMPARE_SOURCE = r"""
extern "C" __global__ void kernelkit_compare(const float* out, const double* ref, const double* scale,
        long long n, double abs_tol, double rel_tol, unsigned long long* counts, unsigned long long* worst_bits) {
    unsigned long long mismatched = 0, nonfinite = 0;
    double worst = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double value = (double)out[i];
        bool finite = isfinite(value);
        double error = finite ? fabs(value - ref[i]) : __longlong_as_double(0x7ff0000000000000LL);
        double magnitude = scale ? scale[i] : fabs(ref[i]);
        if (!(error <= abs_tol + rel_tol * magnitude)) mismatched++;
        if (!finite) nonfinite++;
        else if (error > worst) worst = error;
    }
    if (mismatched) atomicAdd(&counts[0], mismatched);
    if (nonfinite) atomicAdd(&counts[1], nonfinite);
    if (worst > 0.0) atomicMax(worst_bits, (unsigned long long)__double_as_longlong(worst));
}
"""


class DeviceComparer:
    """`compare` for CuPy arrays in one kernel, loaded once per process."""

    def __init__(self) -> None:
        from kernelkit import device

        self.cp = device.cupy()
        self.kernel = self.cp.RawKernel(COMPARE_SOURCE, "kernelkit_compare")
        self.kernel.attributes  # noqa: B018 - compiles and loads the module now
        self.blocks = 4 * self.cp.cuda.Device().attributes["MultiProcessorCount"]

    def __call__(self, out: Any, reference: Any, tolerance: Tolerance, scale: Any = None) -> dict[str, Any]:
        cp = self.cp
        if out.dtype != cp.float32 or out.size != reference.size:
            return compare(out, reference, tolerance, scale)  # a baseline's other dtype: the general path
        flat_out = cp.ascontiguousarray(out).reshape(-1)
        flat_ref = cp.ascontiguousarray(reference, dtype=cp.float64).reshape(-1)
        flat_scale = None if scale is None else cp.ascontiguousarray(scale, dtype=cp.float64).reshape(-1)
        counts = cp.zeros(3, dtype=cp.uint64)  # mismatched, nonfinite, bits of the largest finite error
        self.kernel((self.blocks,), (256,), (flat_out, flat_ref, flat_scale if flat_scale is not None else 0,
                                             np.int64(flat_out.size), np.float64(tolerance.abs),
                                             np.float64(tolerance.rel), counts, counts[2:]))
        mismatched, nonfinite, worst_bits = (int(v) for v in counts.get())
        return {
            "elements": int(flat_ref.size),
            "mismatched": mismatched,
            "nonfinite": nonfinite,
            "max_abs_error": float(np.array(worst_bits, dtype=np.uint64).view(np.float64)),
            "passed": mismatched == 0,
            "tolerance": {"abs": tolerance.abs, "rel": tolerance.rel, "scale": "|reference|" if scale is None else "error_scale"},
        }


def _host_reference(spec: KernelSpec, host_inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
    """The float64 reference and error scale (or None) computed by NumPy from the host inputs."""
    scale = spec.error_scale(host_inputs) if spec.error_scale else None
    return np.asarray(spec.reference(host_inputs)), None if scale is None else np.asarray(scale)


def small_reference(spec: KernelSpec, shape: Shape, host_inputs: Mapping[str, np.ndarray]) -> tuple[Any, Any, str] | None:
    """A small shape's reference and scale from the CPU, with where; None above the small limits."""
    if math.prod(spec.output_shape(shape)) > SMALL_REFERENCE_ELEMENTS or spec.flops(shape) > SMALL_REFERENCE_FLOPS:
        return None
    return (*_host_reference(spec, host_inputs), CPU_SMALL)


def reference_for(spec: KernelSpec, shape: Shape, host_inputs: Mapping[str, np.ndarray],
                  on_device: Mapping[str, Any], computed: tuple[Any, Any, str] | None = None) -> tuple[Any, Any, str]:
    """(reference, scale or None, where it was computed); reference None when it could not be.
    `on_device`: the timed buffers; `host_inputs`: the same for the CPU fallback; `computed`:
    small_reference's answer, made before the lock, only copied to the GPU."""
    from kernelkit import device

    cp = device.cupy()
    if computed is not None:
        reference, scale, where = computed
        return cp.asarray(reference), None if scale is None else cp.asarray(scale), where
    compute = spec.device_reference or spec.reference
    try:
        reference = compute(on_device)
        scale = spec.error_scale(on_device) if spec.error_scale else None
        if not isinstance(reference, cp.ndarray) or not (scale is None or isinstance(scale, cp.ndarray)):
            raise TypeError("the reference returned a host array")
        return reference, scale, "float64 on GPU"
    except Exception as error:  # a NumPy-only function (np.add.at on a host array, ...)
        why = f"{type(error).__name__}: {error}"[:200]
    del on_device
    cp.get_default_memory_pool().free_all_blocks()
    elements = math.prod(spec.output_shape(shape))
    if elements > CPU_REFERENCE_MAX_ELEMENTS:
        return None, None, (f"not verified: the reference does not run on CuPy ({why}) and {elements} output elements "
                            f"are above the CPU limit of {CPU_REFERENCE_MAX_ELEMENTS}")
    reference, scale = _host_reference(spec, host_inputs)
    return (cp.asarray(reference), None if scale is None else cp.asarray(scale),
            f"float64 on CPU (the reference does not run on CuPy: {why})")


def verify_timed_output(spec: KernelSpec, layout: str, shape_text: str, implementation: Any,
                        reference: tuple[Any, Any, str], comparer: DeviceComparer | None = None) -> dict[str, Any]:
    """One untimed call of `implementation` on the timed inputs, judged against float64: the
    record's `verified`, or KitError (nothing timed). `reference` is reference_for's answer, made
    before the call, so a kernel that wrote into its inputs cannot move its own yardstick."""
    from kernelkit import device, library

    cp = device.cupy()
    reference, scale, where = reference
    if implementation.out is not None:
        implementation.out.data.memset_async(0xFF, implementation.out.nbytes)  # all-ones bits: NaN, so an unwritten element fails
    result = implementation.call()
    out = implementation.out if implementation.out is not None else library.as_cupy(result)
    cp.cuda.Device().synchronize()
    if reference is None:
        del out, result
        print(f"{spec.name} {shape_text} {layout}: {where}")
        return {"passed": None, "reference": where}
    verdict = {**(comparer or compare)(out, reference, spec.tolerance, scale), "reference": where}
    del out, result  # a baseline's own output: only the implementation's buffers stay
    if not verdict["passed"]:
        raise KitError(failure_sentence(spec.name, shape_text, layout, verdict))
    print(f"{spec.name} {shape_text} {layout}: output verified against the {where} reference, "
          f"max |err| {verdict['max_abs_error']:.3e} over {verdict['elements']} elements")
    return verdict


def summarize(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the timing records say about their timed-shape verification; None when none carries one
    (runs made before it existed). A failing verification writes no record, so none appears here."""
    verified = [r for r in records if isinstance(r.get("verified"), dict)]
    if not verified:
        return None
    passed = [r for r in verified if r["verified"].get("passed") is True]
    worst = max(passed, key=lambda r: r["verified"]["max_abs_error"], default=None)
    return {
        "records": len(records),
        "verified": len(passed),
        "not_verified": [f"{r['kernel']} {r['shape']} {r['layout']}: {r['verified'].get('reference')}"
                         for r in verified if r["verified"].get("passed") is not True],
        "without": len(records) - len(verified),
        "references": sorted({r["verified"].get("reference", "") for r in passed}),
        "worst": None if worst is None else {key: worst[key] for key in ("kernel", "shape", "layout")}
        | {"max_abs_error": worst["verified"]["max_abs_error"]},
    }
