"""The run's own ceilings and floor, measured on the same GPU in the same run: the device-to-device
copy rate bounds memory-bound kernels, the FP32 GEMM rate arithmetic, and an empty kernel's cost
in the same graph replay is the floor below which no timing resolves anything.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from statistics import median
from typing import Any, Callable, ClassVar, Mapping, Sequence

from kernelkit import KitError
from kernelkit.layout import CEILING_KINDS
from kernelkit import config as kit_config
from kernelkit.gpulock import LOCK_KEYS, LockSettings
from kernelkit.gpulock import add_arguments as add_lock_argument

KINDS = CEILING_KINDS
EMPTY_KERNEL = 'extern "C" __global__ void kernelkit_empty() {}'
# cudaMemcpyAsync reached 2.7 TB/s on the H200 where kernels reached 3.9-4.2 TB/s; a ceiling is the
# best the GPU was seen to do, so the copy ceiling is the fastest of memcpy and three copy kernels.
COPY_KERNEL = r"""
extern "C" __global__ void kernelkit_copy(const float4* __restrict__ source, float4* __restrict__ target,
                                          long long quads) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < quads; i += stride) {
        target[i] = source[i];
    }
}

extern "C" __global__ void kernelkit_copy_one(const float4* __restrict__ source, float4* __restrict__ target,
                                              long long quads) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < quads) {
        target[i] = source[i];
    }
}

// Four loads in flight per thread before any store, each coalesced across the block.
extern "C" __global__ void kernelkit_copy_four(const float4* __restrict__ source, float4* __restrict__ target,
                                               long long quads) {
    const long long first = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    float4 held[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const long long i = first + (long long)k * blockDim.x;
        if (i < quads) {
            held[k] = source[i];
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const long long i = first + (long long)k * blockDim.x;
        if (i < quads) {
            target[i] = held[k];
        }
    }
}
"""
THREADS = 256


@dataclass(frozen=True)
class CeilingSettings(kit_config.StageSettings):
    # Sampled as the timed targets are, less the stopping rule (which would vary their counts).
    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {
        "timing": ("warmup_launches", "launches_per_graph", "samples", "max_sample_ms"),
        "ceilings": ("copy_bytes", "gemm_n"), "gpu_lock": LOCK_KEYS}
    method: Any  # kernel_time.GraphReplayMethod
    copy_bytes: int
    gemm_n: int
    lock: LockSettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "CeilingSettings":
        from kernelkit.kernel_time import GraphReplayMethod

        return cls(GraphReplayMethod.from_timing(config["timing"]), config["ceilings"]["copy_bytes"],
                   config["ceilings"]["gemm_n"], LockSettings.from_config(config["gpu_lock"]))


def _fastest(variants: dict[str, Callable[[], Any]], method: Any) -> tuple[str, dict[str, Any]]:
    """Every variant timed with the method; the name of the one with the lowest median, and all."""
    from kernelkit import kernel_time

    measured = {}
    for name, variant in variants.items():
        samples, used, _ = kernel_time.kernel_time_samples(variant, method)
        measured[name] = {"samples_us": samples, "method_used": used}
    return min(measured, key=lambda name: median(measured[name]["samples_us"])), measured


def compile_kernels(kind: str) -> Any:
    """The kind's kernels compiled and loaded (reading their attributes does both), or, for the
    GEMM, torch imported (call that before the GPU lock: seconds of CPU work)."""
    import cupy as cp

    from kernelkit import library

    if kind == "copy":
        module = cp.RawModule(code=COPY_KERNEL)
        for suffix in ("", "_one", "_four"):
            module.get_function(f"kernelkit_copy{suffix}").attributes
        return module
    if kind == "floor":
        kernel = cp.RawKernel(EMPTY_KERNEL, "kernelkit_empty")
        kernel.attributes
        return kernel
    if kind == "gemm" and library.missing_reason("torch") is None:
        import torch  # noqa: F401 - seconds of import, outside the lock
    return None


def _copy_variants(copy_bytes: int, module: Any = None) -> tuple[dict[str, Callable[[], Any]], int]:
    import cupy as cp

    source = cp.ones(copy_bytes // 16 * 4, dtype=cp.float32)
    target = cp.empty_like(source)
    quads = source.size // 4
    module = module or cp.RawModule(code=COPY_KERNEL)
    grid_stride, one, four = (module.get_function(f"kernelkit_copy{suffix}") for suffix in ("", "_one", "_four"))
    resident_blocks = 8 * cp.cuda.Device().attributes["MultiProcessorCount"]
    arguments = (source, target, cp.int64(quads))
    variants = {
        "memcpy": lambda: target.data.copy_from_device_async(source.data, source.nbytes),
        f"grid_stride_{resident_blocks}x{THREADS}": lambda: grid_stride((resident_blocks,), (THREADS,), arguments),
        "one_quad_per_thread": lambda: one((-(-quads // THREADS),), (THREADS,), arguments),
        "four_quads_per_thread": lambda: four((-(-quads // (4 * THREADS)),), (THREADS,), arguments),
    }
    return variants, 2 * int(source.nbytes)


def _gemm_variants(n: int) -> dict[str, Callable[[], Any]]:
    """cupy.matmul, and torch.matmul (TF32 off) on the same arrays when torch can run here."""
    import cupy as cp

    from kernelkit import library

    a = cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32)
    b = cp.random.default_rng(1).standard_normal((n, n), dtype=cp.float32)
    variants: dict[str, Callable[[], Any]] = {"cupy": lambda: cp.matmul(a, b)}
    if library.missing_reason("torch") is None:
        import torch

        views = library.torch_views({"a": a, "b": b})
        variants["torch"] = lambda: torch.matmul(views["a"], views["b"])
    return variants


def measure(kind: str, method: Any, copy_bytes: int, gemm_n: int, compiled: Any = None) -> dict[str, Any]:
    """Samples and rate of one ceiling (copy, gemm: the fastest of several ways) or of the harness floor;
    `compiled`: what compile_kernels(kind) returned, else it compiles here."""
    import cupy as cp

    from kernelkit import kernel_time

    if kind in ("copy", "l2", "gemm"):
        if kind in ("copy", "l2"):
            # The L2 ceiling copies a quarter of the L2 into another quarter: both buffers stay
            # resident between launches, so it bounds kernels whose working set fits in the L2.
            size = cp.cuda.Device().attributes["L2CacheSize"] // 4 if kind == "l2" else copy_bytes
            variants, moved = _copy_variants(size, compiled)
            where = "both buffers resident in the L2" if kind == "l2" else "from and to DRAM"
            work = {"bytes": moved, "what": f"device-to-device copy of {moved // 2} bytes ({where}), bytes counted "
                                            f"read + written; the fastest of {', '.join(variants)}"}
        else:
            variants = _gemm_variants(gemm_n)
            work = {"flops": 2 * gemm_n**3, "what": f"FP32 {gemm_n}x{gemm_n}x{gemm_n} matrix product (cuBLAS SGEMM); "
                                                    f"the fastest of {', '.join(variants)}"}
        best, measured = _fastest(variants, method)
        return {"kind": kind, **work, "variants": measured, "best": best, "samples_us": measured[best]["samples_us"],
                "method": method.describe(), "method_used": measured[best]["method_used"]}
    if kind != "floor":
        raise ValueError(f"ceiling '{kind}' is not defined; allowed: {', '.join(KINDS)}")
    kernel = compiled or cp.RawKernel(EMPTY_KERNEL, "kernelkit_empty")
    samples, used, _ = kernel_time.kernel_time_samples(lambda: kernel((1,), (1,), ()), method)
    return {"kind": kind, "what": "an empty kernel, one thread, through the same timing method as every target",
            "samples_us": samples, "method": method.describe(), "method_used": used}


def cmd_ceiling(args: argparse.Namespace) -> int:
    from kernelkit import device, gpujob, stats
    from kernelkit.nvml import Nvml
    from kernelkit.records import write_record

    clock = gpujob.JobClock()
    settings = CeilingSettings.from_json(args.settings)
    if args.kind not in KINDS:
        raise KitError(f"ceiling '{args.kind}' is not defined; allowed: {', '.join(KINDS)}")
    cp = device.cupy()
    bus_id = cp.cuda.Device().pci_bus_id
    nvml = Nvml(bus_id)
    if args.kind == "gemm":
        compile_kernels(args.kind)  # imports torch, seconds of CPU work, before the lock
    with gpujob.exclusive_gpu(nvml, bus_id, settings.lock.with_dir(args.lock_dir), clock) as gpu:
        compiled = compile_kernels(args.kind)  # the context and the modules, holding the lock (kernelkit.gpulock)
        before = nvml.snapshot()
        record = measure(args.kind, settings.method, settings.copy_bytes, settings.gemm_n, compiled)
        after = nvml.snapshot()
    # The timing settings are in "method"; the sizes the config chose are stated beside them.
    sizes = {"copy_bytes": settings.copy_bytes, "gemm_n": settings.gemm_n}
    write_record(args.output, {**record, **device.card(), "device_name": device.device_name(), "unit": "microseconds per call",
                               "sizes": sizes, "nvml_before": before, "nvml_after": after,
                               "busy_before_pct": gpu.busy_before_pct, "idle_wait": gpu.idle_wait,
                               "job": clock.describe()})
    print(f"ceiling {args.kind}: " + ", ".join(f"{key} {value:.3f}" for key, value in stats.rates({args.kind: record}).items()))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ceiling", help="measure the copy or GEMM ceiling, or the harness floor (an empty kernel)")
    p.add_argument("--kind", required=True, help=f"which one: {', '.join(KINDS)}")
    p.add_argument("--output", required=True, help="where to write the ceiling record (JSON)")
    kit_config.add_settings_argument(p, CeilingSettings.SECTIONS)
    add_lock_argument(p)
    p.set_defaults(func=cmd_ceiling)
