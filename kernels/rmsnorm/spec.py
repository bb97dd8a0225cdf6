"""RMSNorm, 32 vs 256 threads per row (seed 003).

y[r, c] = x[r, c] * w[c] / sqrt(mean_j x[r, j]^2 + 1e-5), contiguous FP32. Both layouts
run the same source with one block per row; only the block size differs.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit.spec import KernelSpec, Launch, Mutation, Shape, Tolerance

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


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    rows, _ = shape
    threads = int(layout["threads"])
    return Launch(grid=(rows,), block=(threads,), shared_mem=threads * 4)


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    rows, cols = shape
    return (buffers["x"], buffers["weight"], out, np.int32(rows), np.int32(cols), np.float32(EPS))


def bytes_moved(shape: Shape) -> int:
    rows, cols = shape
    # Compulsory traffic: x and w read once, y written once. The second pass over a row
    # is served from cache and not counted.
    return 4 * (rows * cols + cols + rows * cols)


def flops(shape: Shape) -> int:
    rows, cols = shape
    # square-and-add per element, then two multiplies per element; the per-row rsqrt is ignored.
    return rows * cols * 4


SPEC = KernelSpec(
    name="rmsnorm",
    source="rmsnorm.cu",
    entry="rmsnorm",
    dims=("rows", "cols"),
    layouts={"t32": {"threads": 32}, "t256": {"threads": 256}},
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
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    bytes_moved=bytes_moved,
    flops=flops,
)
