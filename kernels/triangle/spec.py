"""Triangle contraction of AlphaFold's outgoing triangle update (seed 000's second control).

out[i, j, c] = sum_k a[i, k, c] * b[j, k, c], shapes written NxC (n x n pairs, c channels).
A reduction over n terms: the tolerance scales with sum_k |a b| (see KernelSpec.error_scale).
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


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    n, channels = shape
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
    layouts={"direct": {"threads": THREADS}},
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
    baselines={
        "cupy": Baseline("cupy", "cupy.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS)", cupy_call),
        "torch": Baseline("torch", "torch.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS, TF32 off)", torch_call),
        "triton": Baseline("triton", "triton_triangle.py: a program per (i, 32 j, 32 c), sum over k", triton_call),
    },
)
