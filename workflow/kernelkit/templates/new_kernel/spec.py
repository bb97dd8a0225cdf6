"""NEWKERNEL: y = scale * x, contiguous FP32 (written by `kernelkit new` as a starting point).

Everything the kit needs to check, time and report this kernel is declared here: how inputs
are made, the float64 reference, the launch, the negative controls (edits of the source that
the checks must catch) and the bytes and FLOPs behind the report's rates.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit.spec import KernelSpec, Launch, Mutation, Shape, Tolerance

THREADS = 256


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    (n,) = shape
    # A scale well away from 1, so that leaving it out changes every non-zero element.
    scale = np.array([1.5 + rng.random()], dtype=np.float32)
    return {"x": pattern_array(pattern, (n,), rng), "scale": scale}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return inputs["scale"].astype(np.float64)[0] * inputs["x"].astype(np.float64)


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    (n,) = shape
    threads = int(layout["threads"])
    return Launch(grid=(min(-(-n // threads), 2**31 - 1),), block=(threads,))


def arguments(buffers: Mapping[str, Any], out: Any, shape: Shape) -> tuple:
    (n,) = shape
    return (buffers["x"], buffers["scale"], out, np.int64(n))


SPEC = KernelSpec(
    name="NEWKERNEL",
    source="NEWKERNEL.cu",
    entry="NEWKERNEL",
    dims=("n",),
    layouts={"t256": {"threads": THREADS}},
    # Around the block size and the warp size, so that a missed tail shows.
    correctness_shapes=((1,), (31,), (33,), (255,), (257,), (4097,)),
    # One FP32 rounding of the product: half an ulp, 6e-8 relative.
    tolerance=Tolerance(abs=1e-6, rel=1e-6),
    mutations={
        "scale": Mutation(find="scale[0] * x[i]", replace="x[i]", why="the scale is not applied"),
        "tail": Mutation(find="i < n; i += stride", replace="i < n - 1; i += stride",
                         why="the last element is never written"),
    },
    make_inputs=make_inputs,
    reference=reference,
    launch=launch,
    arguments=arguments,
    # x read once and y written once; the scale is one cached float.
    bytes_moved=lambda shape: 8 * shape[0],
    flops=lambda shape: shape[0],
)
