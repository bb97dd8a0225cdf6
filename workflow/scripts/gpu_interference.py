"""Which work of other processes disturbs a timed kernel on the same GPU?

Times a 1 GB device copy (40 copies per sample, CUDA events) for a few seconds, first alone,
then while eight other processes loop over one kind of work each:
  ctx     start a process that creates a CUDA context and exits;
  module  compile and load a new kernel module;
  pin     pin and release host memory (512 MB);
  alloc   allocate and free device memory (1 GB);
then alone again, printing per kind the median, 90th percentile and largest sample (us per copy)
and how many samples lie 5% above the median: the measurement behind kernelkit.gpulock keeping a
process's CUDA context inside the GPU lock. Run it on an otherwise idle GPU:

    python workflow/scripts/gpu_interference.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

DISTURB_S = 6.5
SETTLE_S = 2.0
TIME_S = 4.0
DISTURBERS = 8
KINDS = ("alone", "ctx", "module", "pin", "alloc", "alone_again")


def disturb(kind: str) -> None:
    """One disturbing process: loop over `kind` for DISTURB_S seconds."""
    end = time.time() + DISTURB_S
    if kind == "ctx":
        program = "import cupy as cp; cp.empty(1); cp.cuda.Device().synchronize()"
        while time.time() < end:
            subprocess.run([sys.executable, "-c", program], check=True)
        return
    import cupy as cp

    cp.empty(1)
    count = 0
    while time.time() < end:
        if kind == "module":
            kernel = cp.RawKernel(f'extern "C" __global__ void f{os.getpid()}(float* x) {{ x[threadIdx.x] += {count}; }}',
                                  f"f{os.getpid()}")
            kernel.attributes  # noqa: B018 - compiles and loads the module
        elif kind == "pin":
            import cupyx

            pinned = cupyx.empty_pinned((128 << 20,), dtype="float32")
            pinned[::4096] = 1
            del pinned
        elif kind == "alloc":
            cp.empty((256 << 20,), dtype=cp.float32)  # allocated, dropped at once, then freed
            cp.get_default_memory_pool().free_all_blocks()
        count += 1


def time_copies(seconds: float) -> dict[str, float]:
    import cupy as cp

    source = cp.ones((256 << 20,), dtype=cp.float32)
    target = cp.empty_like(source)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(20):
        cp.copyto(target, source)
    cp.cuda.Device().synchronize()
    samples, stop = [], time.time() + seconds
    while time.time() < stop:
        start.record()
        for _ in range(40):
            cp.copyto(target, source)
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 40 * 1000.0)
    samples.sort()
    middle = samples[len(samples) // 2]
    return {"samples": len(samples), "median_us": round(middle, 2), "p90_us": round(samples[int(len(samples) * 0.9)], 2),
            "max_us": round(samples[-1], 2), "over_5pct": sum(value > 1.05 * middle for value in samples)}


def main() -> None:
    for kind in KINDS:
        others = [] if kind.startswith("alone") else [
            subprocess.Popen([sys.executable, __file__, "--disturb", kind]) for _ in range(DISTURBERS)]
        if others:
            time.sleep(SETTLE_S)
        print(json.dumps({"while": kind, **time_copies(TIME_S)}), flush=True)
        for process in others:
            process.wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--disturb":
        disturb(sys.argv[2])
    else:
        main()
