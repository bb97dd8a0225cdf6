"""Triangle contraction of AlphaFold's outgoing triangle update (seed 000's second control).

out[i, j, c] = sum_k a[i, k, c] * b[j, k, c], shapes written NxC (n x n pairs, c channels).
A reduction over n terms: the tolerance scales with sum_k |a b| (see KernelSpec.error_scale).

Layouts: `direct` (the seed's: a thread per output, n strided reads of a and b each) and
`batched` (kernel `triangle_batched`): the contraction is a batch over channels of
O_c = A_c B_c^T, so it is tiled like a matrix product. A block owns 32 i x 32 j x 16 channels,
stages 8 k at a time of both operands in shared memory (channels innermost: 64-byte runs of
16-byte quads from global memory) while the next step loads into registers, and each thread
accumulates 4 x 4 x 4 outputs from 8 shared-memory quads per k (64 multiply-adds). Each a and b
element is read from L2 n / 32 times instead of n times. `min_blocks` is the occupancy asked of
the register allocator: 1 gives 195 registers and no spills (one block of 8 warps per
multiprocessor), 2 caps them at 128 with a few spilled bytes; which is faster is for a sweep
to measure. Controls aimed at `batched`: the
last partial step of 8 k dropped, channel y of each quad multiplied by b's channel x.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

THREADS = 256


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n, channels = shape
    return {"a": pattern_array(pattern, (n, n, channels), rng), "b": pattern_array(pattern, (n, n, channels), rng)}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.einsum("ikc,jkc->ijc", inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))


def error_scale(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.einsum("ikc,jkc->ijc", np.abs(inputs["a"].astype(np.float64)), np.abs(inputs["b"].astype(np.float64)))


BATCHED_TILE = {"i": 32, "j": 32, "channels": 16}


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    n, channels = shape
    if layout.get("entry") == "triangle_batched":
        tile = BATCHED_TILE
        return Launch(grid=(-(-n // tile["j"]), -(-n // tile["i"]), -(-channels // tile["channels"])), block=(256,))
    return Launch(grid=(-(-n * n * channels // THREADS),), block=(THREADS,))


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    n, channels = shape
    return (buffers["a"], buffers["b"], out, np.int32(n), np.int32(channels))


def cupy_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["a"])
    return lambda: xp.einsum("ikc,jkc->ijc", buffers["a"], buffers["b"])


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    return lambda: torch.einsum("ikc,jkc->ijc", t["a"], t["b"])


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_triangle.py")
    t = library.torch_views(buffers)
    return lambda: kernels.triangle(t["a"], t["b"])


SPEC = KernelSpec(
    name="triangle",
    source="triangle.cu",
    entry="triangle",
    dims=("n", "channels"),
    layouts={"direct": {"threads": THREADS}, "batched": {"entry": "triangle_batched", "threads": 256, "min_blocks": 1}},
    correctness_shapes=((1, 1), (7, 3), (33, 5), (64, 32)),
    # FP32 sums of n products err by about n * 6e-8 * sum|a b| at worst.
    tolerance=Tolerance(abs=1e-6, rel=1e-5),
    mutations={
        "last_k": Mutation(find="k < n; ++k", replace="k < n - 1; ++k", why="the last k is left out of every sum"),
        "transpose": Mutation(
            find="b[((long long)j * n + k)",
            replace="b[((long long)k * n + j)",
            why="b is read as b[k, j, c] instead of b[j, k, c]",
        ),
        "batched_k_tail": Mutation(
            find="const int k_tiles = (n + TRI_BK - 1) / TRI_BK;",
            replace="const int k_tiles = n / TRI_BK;",
            why="batched drops the last partial step of 8 k",
        ),
        "batched_channel": Mutation(
            find="acc.y += a.y * b.y;",
            replace="acc.y += a.y * b.x;",
            why="batched multiplies channel y of each quad by b's channel x",
        ),
    },
    make_inputs=make_inputs,
    output_shape=lambda shape: (shape[0], shape[0], shape[1]),
    reference=reference,
    launch=launch,
    arguments=arguments,
    # Compulsory traffic: a, b and out once each (n^2 c floats each); the n-fold reuse of a
    # and b is expected from cache.
    bytes_moved=lambda shape: 4 * 3 * shape[0] ** 2 * shape[1],
    flops=lambda shape: 2 * shape[0] ** 3 * shape[1],
    error_scale=error_scale,
    layout_options=lambda layout: (f"-DTRI_MIN_BLOCKS={int(layout['min_blocks'])}",) if "min_blocks" in layout else (),
    baselines={
        "cupy": Baseline("cupy", "cupy.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS)", cupy_call),
        "torch": Baseline("torch", "torch.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS, TF32 off)", torch_call),
        "triton": Baseline("triton", "triton_triangle.py: a program per (i, 32 j, 32 c), sum over k", triton_call),
    },
)
