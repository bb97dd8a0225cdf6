"""RMSNorm, 32 vs 256 threads per row (seed 003), and a one-pass vectorized layout.

y[r, c] = x[r, c] * w[c] / sqrt(mean_j x[r, j]^2 + 1e-5), contiguous FP32. The seed's
layouts `t32` and `t256` run the kernel `rmsnorm` with one block per row; only the block
size differs (x is read twice, the second time from cache).

`vec` (kernel `rmsnorm_vec`) aims at copy speed: x is read once, with 128-bit loads, and the
row stays in registers (`vec` quads per thread, a compile-time size so the array lives in
registers) until it is written. The threads per row follow the width: the fewest whole warps
that hold the row in `vec` quads per thread (a warp per row, `rows_per_block`
rows per block, for narrow rows; a block per row, with warp shuffles and one shared-memory
step across warps, for wide ones), so every width keeps few idle threads and a short
reduction. Odd widths leave rows misaligned, so each row is read as a scalar head up to
its first 16-byte boundary, quads, and a scalar tail: the largest default shape, 8193
columns, still streams through 128-bit loads. A layout may fix `threads` instead.
Negative controls aimed at `vec`: a dropped tail, a head left out of the sum, the cross-warp
sum reduced to the first warp. (A removed barrier would be a race that may or may not show
in a given run, and a control that passes stops the workflow, so none is used.)
Library baselines: `torch` (torch.nn.functional.rms_norm) and `triton` (triton_rmsnorm.py).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit import KitError, library
from kernelkit.inputs import pattern_array
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

EPS = 1e-5


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    rows, cols = shape
    weight = (0.5 + rng.random(cols)).astype(np.float32)
    return {"x": pattern_array(pattern, (rows, cols), rng), "weight": weight}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    x = inputs["x"].astype(np.float64)
    weight = inputs["weight"].astype(np.float64)
    inv_rms = 1.0 / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + EPS)
    return x * weight * inv_rms


def vec_threads(layout: Mapping[str, Any], cols: int) -> int:
    """Threads per row of `vec`: its fixed `threads`, else the fewest whole warps that hold the
    row in `vec` quads each (any warp count works: the cross-warp sum loops over warps)."""
    if "threads" in layout:
        threads = int(layout["threads"])
    else:
        threads = 32 * max(1, -(-cols // (4 * int(layout["vec"]) * 32)))
    if threads > int(layout["max_threads"]) or threads % 32 or 4 * int(layout["vec"]) * threads < cols:
        raise KitError(f"rmsnorm layout vec={layout['vec']} cannot hold a row of {cols} columns in {threads} threads "
                       f"(whole warps, at most max_threads={layout['max_threads']}, holding 4 * vec floats each); raise vec")
    return threads


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    rows, cols = shape
    if layout.get("entry") == "rmsnorm_vec":
        threads = vec_threads(layout, cols)
        rows_per_block = int(layout["rows_per_block"]) if threads == 32 else 1
        return Launch(grid=(-(-rows // rows_per_block),), block=(threads, rows_per_block))
    threads = int(layout["threads"])
    return Launch(grid=(rows,), block=(threads,), shared_mem=threads * 4)


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    if "vec" not in layout:
        return ()
    return (f"-DRMSNORM_VEC={int(layout['vec'])}", f"-DRMSNORM_MAX_THREADS={int(layout['max_threads'])}")


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    rows, cols = shape
    return (buffers["x"], buffers["weight"], out, np.int32(rows), np.int32(cols), np.float32(EPS))


def bytes_moved(shape: Shape) -> int:
    rows, cols = shape
    # Compulsory traffic: x and w read once, y written once. The second pass over a row
    # is served from cache and not counted.
    return 4 * (rows * cols + cols + rows * cols)


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    return lambda: torch.nn.functional.rms_norm(t["x"], (shape[1],), t["weight"], EPS)


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_rmsnorm.py")
    t = library.torch_views(buffers)
    return lambda: kernels.rmsnorm(t["x"], t["weight"], EPS)


def flops(shape: Shape) -> int:
    rows, cols = shape
    # square-and-add per element, then two multiplies per element; the per-row rsqrt is ignored.
    return rows * cols * 4


SPEC = KernelSpec(
    name="rmsnorm",
    source="rmsnorm.cu",
    entry="rmsnorm",
    dims=("rows", "cols"),
    layouts={
        "t32": {"threads": 32},
        "t256": {"threads": 256},
        "vec": {"entry": "rmsnorm_vec", "vec": 8, "rows_per_block": 4, "max_threads": 512},
    },
    correctness_shapes=tuple((8, cols) for cols in (1, 31, 33, 127, 4096, 8193)),
    tolerance=Tolerance(abs=1e-5, rel=1e-4),
    mutations={
        "epsilon": Mutation(
            find="partial[0] / cols + eps",
            replace="partial[0] / cols",
            why="epsilon removed from the root mean square: an all-zero row divides zero by zero",
        ),
        "tail": Mutation(
            find="c < cols; c += blockDim.x) {\n        y_row[c]",
            replace="c < cols - 1; c += blockDim.x) {\n        y_row[c]",
            why="the final column of every row is never written",
        ),
        "barrier": Mutation(
            find="partial[threadIdx.x + stride];\n        __syncthreads();",
            replace="partial[threadIdx.x + stride];",
            why="the barrier inside the tree reduction is removed: a step reads partial sums the previous one "
                "may not have written yet (a race, which often still gives the right answer)",
            needs_gpu_to_show="a race needs concurrent threads; the float32 emulation runs the reduction in order",
        ),
        "vec_tail": Mutation(
            find="const int tail = cols - head - 4 * quads;",
            replace="const int tail = vector ? 0 : cols - head - 4 * quads;",
            why="vec drops the 1-3 elements after a row's last quad (never written, not summed)",
        ),
        "vec_head": Mutation(
            find="float ss = h * h + t * t;",
            replace="float ss = t * t;",
            why="vec leaves the head (elements before a row's first 16-byte boundary) out of the sum of squares",
        ),
        "vec_warps": Mutation(
            find="for (int w = 0; w < warps; ++w) total",
            replace="for (int w = 0; w < 1; ++w) total",
            why="vec's cross-warp sum keeps only the first warp's partial",
        ),
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    bytes_moved=bytes_moved,
    flops=flops,
    layout_options=layout_options,
    # Quads a thread holds (8 or 16: fewer threads per row and more bytes in flight each, both
    # spill-free under the 512-thread bound) and rows per block where a row fits one warp.
    sweeps={"vec": {"vec": [8, 16], "rows_per_block": [1, 2, 4, 8]}},
    baselines={
        "torch": Baseline("torch", "torch.nn.functional.rms_norm", torch_call),
        "triton": Baseline("triton", "triton_rmsnorm.py: a program per row, the row in registers, one read of x",
                           triton_call),
    },
)
