"""Matrix multiplication C = A B in FP32, row-major (seed 000's rewritten kernel).

Layouts: `tile16` (one output per thread from 16 x 16 shared tiles: the seed's first version)
and `reg4x4` (64 x 64 block tile, 4 x 4 outputs per thread, contraction step 32, 128-bit loads
into 16 KiB of shared memory: the rewrite). Shapes are MxNxK. Correctness includes sizes that
are multiples of no tile (33x65x17, 1000x1000x1000) and widths that force the scalar load path.
A reduction over K: the tolerance scales with sum_k |a b| (see KernelSpec.error_scale).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m, n, k = shape
    return {"a": pattern_array(pattern, (m, k), rng), "b": pattern_array(pattern, (k, n), rng)}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)


def error_scale(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    m, n, _ = shape
    tile = int(layout["block_tile"])
    return Launch(grid=(-(-n // tile), -(-m // tile)), block=(16, 16))


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    m, n, k = shape
    return (buffers["a"], buffers["b"], out, np.int32(m), np.int32(n), np.int32(k))


def cupy_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["a"])
    return lambda: xp.matmul(buffers["a"], buffers["b"])


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    return lambda: torch.matmul(t["a"], t["b"])


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_matmul.py")
    t = library.torch_views(buffers)
    return lambda: kernels.matmul(t["a"], t["b"])


SPEC = KernelSpec(
    name="matmul",
    source="matmul.cu",
    entry="matmul_tile16",
    dims=("m", "n", "k"),
    layouts={
        "tile16": {"entry": "matmul_tile16", "block_tile": 16},
        "reg4x4": {"entry": "matmul_reg4x4", "block_tile": 64},
    },
    correctness_shapes=((1, 1, 1), (33, 65, 17), (64, 64, 64), (100, 36, 40), (1000, 1000, 1000)),
    # FP32 sums of K products err by at most about K * 6e-8 * sum|a b|: 6e-5 relative at K = 1000.
    tolerance=Tolerance(abs=1e-7, rel=1e-4),
    mutations={
        "k_tail": Mutation(
            find="t < (K + 15) / 16;",
            replace="t < K / 16;",
            why="tile16 drops the last partial 16-wide step of the contraction",
        ),
        "overwrite": Mutation(
            find="acc[i][j] += av[i] * bv[j];",
            replace="acc[i][j] = av[i] * bv[j];",
            why="reg4x4 overwrites its accumulators instead of adding to them",
        ),
    },
    make_inputs=make_inputs,
    output_shape=lambda shape: (shape[0], shape[1]),
    reference=reference,
    launch=launch,
    arguments=arguments,
    bytes_moved=lambda shape: 4 * (shape[0] * shape[2] + shape[2] * shape[1] + shape[0] * shape[1]),
    flops=lambda shape: 2 * shape[0] * shape[1] * shape[2],
    error_scale=error_scale,
    baselines={
        "cupy": Baseline("cupy", "cupy.matmul (cuBLAS SGEMM)", cupy_call),
        "torch": Baseline("torch", "torch.matmul (cuBLAS, TF32 off)", torch_call),
        "triton": Baseline("triton", "triton_matmul.py: 64x64 tiles, K step 32, IEEE FP32 dot", triton_call),
    },
)
