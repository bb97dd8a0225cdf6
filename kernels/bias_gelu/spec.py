"""Bias + GELU (seed 000's first control operation): y = GELU(x + b) in the tanh form.

The reference uses the same tanh form in float64, so the comparison measures rounding, not
the difference between the tanh and erf definitions of GELU.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

THREADS = 256


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    rows, cols = shape
    # A bias well away from zero, so that an all-zero x still has a non-zero answer.
    bias = (0.5 + rng.random(cols)).astype(np.float32)
    return {"x": pattern_array(pattern, (rows, cols), rng), "bias": bias}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    z = inputs["x"].astype(np.float64) + inputs["bias"].astype(np.float64)
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    rows, cols = shape
    return Launch(grid=(min(-(-rows * cols // THREADS), 2**31 - 1),), block=(THREADS,))


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    rows, cols = shape
    return (buffers["x"], buffers["bias"], out, np.int64(rows * cols), np.int32(cols))


def cupy_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["x"])
    x, bias = buffers["x"], buffers["bias"]

    def call():
        z = x + bias
        return 0.5 * z * (1.0 + xp.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))

    return call


def torch_call(buffers: Mapping[str, Any], shape: Shape):
    import torch

    t = library.torch_views(buffers)
    return lambda: torch.nn.functional.gelu(t["x"] + t["bias"], approximate="tanh")


def triton_call(buffers: Mapping[str, Any], shape: Shape):
    kernels = library.kernel_module(__file__, "triton_bias_gelu.py")
    t = library.torch_views(buffers)
    return lambda: kernels.bias_gelu(t["x"], t["bias"])


SPEC = KernelSpec(
    name="bias_gelu",
    source="bias_gelu.cu",
    entry="bias_gelu",
    dims=("rows", "cols"),
    layouts={"elementwise": {"threads": THREADS}},
    correctness_shapes=((8, 1), (8, 31), (8, 33), (8, 127), (8, 4096), (3, 8193)),
    tolerance=Tolerance(abs=1e-5, rel=1e-4),
    mutations={
        "bias": Mutation(
            find="x[i] + bias[i % cols]",
            replace="x[i]",
            why="the bias is not added",
        ),
        "tail": Mutation(
            find="i < total; i += stride",
            replace="i < total - 1; i += stride",
            why="the last element is never written",
        ),
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    # x and y once each, the bias row once from DRAM (reused from cache).
    bytes_moved=lambda shape: 4 * (2 * shape[0] * shape[1] + shape[1]),
    # add, z^3 (2), fma-style inner (3), tanh counted as 1, final (3): 10 per element.
    flops=lambda shape: 10 * shape[0] * shape[1],
    baselines={
        "cupy": Baseline("cupy", "CuPy elementwise expressions of the tanh form (one kernel per operator)", cupy_call),
        "torch": Baseline("torch", "x + b, then torch.nn.functional.gelu(approximate='tanh')", torch_call),
        "triton": Baseline("triton", "triton_bias_gelu.py: one fused elementwise kernel", triton_call),
    },
)
