"""The run's own ceilings and floor, measured on the same GPU in the same run.

A timing means little without the limits it runs against: the device-to-device copy rate
bounds memory-bound kernels, the library's FP32 GEMM rate bounds arithmetic, and the
per-launch cost of an empty kernel in the same graph replay is the floor below which no
timing resolves anything. Each is a target of its own; the report divides every timing by
the ceiling that bounds it (see `roofline`), which is plain arithmetic, tested on the CPU.
"""

from __future__ import annotations

from statistics import median
from typing import Any, Callable

KINDS = ("copy", "gemm", "floor")
EMPTY_KERNEL = 'extern "C" __global__ void kernelkit_empty() {}'
# cudaMemcpyAsync reached 2.7 TB/s on the H200 where a 128-bit kernel reaches 4.2 TB/s (run
# h200-q-extras flagged such a kernel "above ceiling"), so the copy ceiling is the faster of
# the two, and both are recorded.
COPY_KERNEL = r"""
extern "C" __global__ void kernelkit_copy(const float4* __restrict__ source, float4* __restrict__ target,
                                          long long quads) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += stride) {
        target[i] = source[i];
    }
}
"""


def measure(kind: str, method: Any, copy_bytes: int, gemm_n: int) -> dict[str, Any]:
    """Samples and rate of one ceiling (copy, gemm) or of the harness floor."""
    import cupy as cp

    from kernelkit import timing

    call: Callable[[], Any]
    if kind == "copy":
        source = cp.ones(copy_bytes // 16 * 4, dtype=cp.float32)
        target = cp.empty_like(source)
        kernel = cp.RawKernel(COPY_KERNEL, "kernelkit_copy")
        blocks = 8 * cp.cuda.Device().attributes["MultiProcessorCount"]
        variants = {
            "memcpy": lambda: target.data.copy_from_device_async(source.data, source.nbytes),
            "kernel": lambda: kernel((blocks,), (256,), (source, target, cp.int64(source.size // 4))),
        }
        measured = {}
        for name, variant in variants.items():
            samples, used, _ = timing.kernel_time_samples(variant, method)
            measured[name] = {"samples_us": samples, "method_used": used}
        best = min(measured, key=lambda name: median(measured[name]["samples_us"]))
        return {"kind": kind, "bytes": 2 * int(source.nbytes), "variants": measured, "best": best,
                "what": f"device-to-device copy of {source.nbytes} bytes, bytes counted read + written; the faster of "
                        f"cudaMemcpyAsync and a 128-bit grid-stride copy kernel ({blocks} blocks of 256): {best}",
                "samples_us": measured[best]["samples_us"], "method": method.describe(),
                "method_used": measured[best]["method_used"]}
    elif kind == "gemm":
        a = cp.random.default_rng(0).standard_normal((gemm_n, gemm_n), dtype=cp.float32)
        b = cp.random.default_rng(1).standard_normal((gemm_n, gemm_n), dtype=cp.float32)
        call = lambda: cp.matmul(a, b)  # noqa: E731
        work = {"flops": 2 * gemm_n**3, "what": f"cupy.matmul FP32 {gemm_n}x{gemm_n}x{gemm_n} (cuBLAS SGEMM)"}
    elif kind == "floor":
        kernel = cp.RawKernel(EMPTY_KERNEL, "kernelkit_empty")
        call = lambda: kernel((1,), (1,), ())  # noqa: E731
        work = {"what": "an empty kernel, one thread, through the same timing method as every target"}
    else:
        raise ValueError(f"ceiling '{kind}' is not defined; allowed: {', '.join(KINDS)}")
    samples, used, _ = timing.kernel_time_samples(call, method)
    return {"kind": kind, **work, "samples_us": samples, "method": method.describe(), "method_used": used}


def rates(records: dict[str, dict[str, Any]]) -> dict[str, float]:
    """copy GB/s, gemm GFLOP/s and the floor in us, from the medians of the ceiling targets."""
    found = {}
    if "copy" in records:
        found["copy_gb_s"] = records["copy"]["bytes"] / (median(records["copy"]["samples_us"]) * 1e-6) / 1e9
    if "gemm" in records:
        found["gemm_gflop_s"] = records["gemm"]["flops"] / (median(records["gemm"]["samples_us"]) * 1e-6) / 1e9
    if "floor" in records:
        found["floor_us"] = median(records["floor"]["samples_us"])
    return found


def roofline(bytes_moved: int, flops: int, median_us: float, ceiling: dict[str, float]) -> dict[str, Any]:
    """Which ceiling bounds a timing, and the fraction of it reached.

    A kernel whose arithmetic intensity (FLOPs per byte) lies below the ridge point
    (GEMM rate / copy rate) cannot beat the copy rate; above it, the GEMM rate. A fraction
    above 1 is impossible for DRAM-resident data: it means cache reuse the spec's byte count
    does not see, or a measurement artefact; never a win.
    """
    seconds = median_us * 1e-6
    achieved_gb_s, achieved_gflop_s = bytes_moved / seconds / 1e9, flops / seconds / 1e9
    if "copy_gb_s" not in ceiling or "gemm_gflop_s" not in ceiling:
        return {"bound": "unknown", "fraction": None, "impossible": False}
    ridge = ceiling["gemm_gflop_s"] / ceiling["copy_gb_s"]
    intensity = flops / bytes_moved if bytes_moved else float("inf")
    if intensity < ridge:
        fraction = achieved_gb_s / ceiling["copy_gb_s"]
        bound = "memory"
    else:
        fraction = achieved_gflop_s / ceiling["gemm_gflop_s"]
        bound = "arithmetic"
    return {"bound": bound, "fraction": fraction, "impossible": fraction > 1.0, "intensity": intensity, "ridge": ridge}


def near_floor(median_us: float, floor_us: float | None, factor: float = 3.0) -> bool:
    """A timing within `factor` times the empty kernel's cost measures the harness as much as the kernel."""
    return floor_us is not None and median_us < factor * floor_us
