"""Layer normalization with learned weight and bias, eps 1e-5 (seed 000's rewritten kernel).

Layouts: `block` (a block of 256 threads per row, shared-memory tree with barriers: the seed's
first version) and `warp` (a warp per row, eight warps per block, 128-bit loads for widths
that are multiples of 4, shuffle reductions for the mean and the centred variance: the
rewrite). Correctness widths cover both the vector and the scalar path of `warp`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

EPS = 1e-5
WARPS_PER_BLOCK = 8


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    rows, cols = shape
    return {
        "x": pattern_array(pattern, (rows, cols), rng),
        "weight": (0.5 + rng.random(cols)).astype(np.float32),
        # Non-zero bias: an all-zero row must still produce a non-zero answer.
        "bias": (0.25 + 0.5 * rng.random(cols)).astype(np.float32),
    }


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    x = inputs["x"].astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * inputs["weight"].astype(np.float64) + inputs["bias"].astype(np.float64)


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    rows, _ = shape
    threads = int(layout["threads"])
    if layout["entry"] == "layernorm_block":
        return Launch(grid=(rows,), block=(threads,), shared_mem=threads * 4)
    rows_per_block = threads // 32
    return Launch(grid=(-(-rows // rows_per_block),), block=(threads,))


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    rows, cols = shape
    return (buffers["x"], buffers["weight"], buffers["bias"], out, np.int32(rows), np.int32(cols), np.float32(EPS))


def cupy_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["x"])
    x, weight, bias = buffers["x"], buffers["weight"], buffers["bias"]

    def call():
        centred = x - x.mean(axis=1, keepdims=True)
        var = (centred * centred).mean(axis=1, keepdims=True)
        return centred / xp.sqrt(var + EPS) * weight + bias

    return call


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    return lambda: torch.nn.functional.layer_norm(t["x"], (shape[1],), t["weight"], t["bias"], EPS)


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_layernorm.py")
    t = library.torch_views(buffers)
    return lambda: kernels.layernorm(t["x"], t["weight"], t["bias"], EPS)


SPEC = KernelSpec(
    name="layernorm",
    source="layernorm.cu",
    entry="layernorm_block",
    dims=("rows", "cols"),
    layouts={
        "block": {"entry": "layernorm_block", "threads": 256},
        "warp": {"entry": "layernorm_warp", "threads": 32 * WARPS_PER_BLOCK},
    },
    # 9 rows: the warp layout's second block holds one row and seven idle warps.
    correctness_shapes=tuple((9, cols) for cols in (1, 31, 33, 127, 1024, 4096)),
    tolerance=Tolerance(abs=1e-5, rel=1e-4),
    mutations={
        "bias": Mutation(find="* rstd * w + b;", replace="* rstd * w;", why="the bias is not added"),
        "tree_width": Mutation(
            find="for (int stride = blockDim.x / 2;",
            replace="for (int stride = blockDim.x / 4;",
            why="the block tree starts at a quarter of the block: half the partial sums are lost",
        ),
        "shuffle_width": Mutation(
            find="for (int offset = 16;",
            replace="for (int offset = 8;",
            why="the warp reduction starts at offset 8: lanes 16-31 are left out",
        ),
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    # x read from DRAM once (the second and third passes hit cache for these widths), w and b
    # once, y written once.
    bytes_moved=lambda shape: 4 * (2 * shape[0] * shape[1] + 2 * shape[1]),
    # sum (1), centre and square (3), normalise and scale (4) per element.
    flops=lambda shape: 8 * shape[0] * shape[1],
    vector_width={"warp": 4},
    baselines={
        "cupy": Baseline("cupy", "CuPy mean, subtract, square, mean, sqrt, divide, scale (one kernel each)", cupy_call),
        "torch": Baseline("torch", "torch.nn.functional.layer_norm", torch_call),
        "triton": Baseline("triton", "triton_layernorm.py: a program per row, the row in registers", triton_call),
    },
)
