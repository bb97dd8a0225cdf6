"""Bias + GELU (seed 000's first control operation): y = GELU(x + b) in the tanh form.

The reference uses the same tanh form in float64, so the comparison measures rounding, not
the difference between the tanh and erf definitions of GELU.

Layouts: `elementwise` (the seed's: a thread per element, grid-stride, tanhf, a 64-bit modulo
for the bias index) and `vec4` (kernel `bias_gelu_vec4`), which aims at copy speed: 128-bit
loads and stores of x and y with streaming cache hints, a 2-D grid in which a thread owns one
column quad and keeps its bias quad in registers while it walks a run of consecutive rows (no
modulo, four rows' loads in flight before any arithmetic; the blocks resident at a time stream
one contiguous window of memory; at most 32 registers so that 8 blocks of 256 fill an SM), and the exact identity 0.5 z (1 + tanh u) =
z / (1 + exp(-2u)) computed with the fast exponential and division (a few instructions
instead of tanhf, and no cancellation for z << 0). When the width is not a multiple of 4 the
bias row does not line up with quads, so the flat array is read in quads with a wrapping bias
index, and the last total % 4 elements (or everything, if x or y is misaligned) take a scalar
loop. Controls aimed at `vec4`: the scalar tail's last element, the row left after the
four-rows loop, the bias quad fixed to the first, the bias index not wrapping at a row end.
`flat` (kernel `bias_gelu_flat`) is vec4's arithmetic in the layout of a fast copy (and of the
Triton baseline, 0.97 of the copy ceiling where vec4 reaches 0.92): the array as one flat run
of quads, block b owning `quads * threads` consecutive quads, thread t the quads t, t + threads,
... of it (each access coalesced across the block), all of a thread's x loads issued before any
arithmetic, a grid sized to the array (no loop, no per-row bookkeeping) and at most 32
registers for 2048 threads per SM. The bias quad is the flat quad mod cols / 4: one remainder
per thread, then a wrapping step. `stream` 1 reads x evict-first and writes y streaming; 0 uses
plain accesses (as the copy kernels of the ceiling do); 2 reads x past L1 with an L2
evict-first policy (x lines leave L2 before the dirty y lines) and writes y plainly. H200,
8192x4096: plain beat stream 1 at every point, one or two quads in blocks of 128 fastest
(64.1 / 64.6 us, Triton 64.3, copy 62.6); the default is two quads in blocks of 128, plain (one
quad would leave the bias step, and the control aimed at it, dead at the default). Widths that are not a multiple of 4
take an element-wise grid-stride loop. Controls aimed at `flat`: the bias step reset to the
row's first quad instead of wrapping, the element-wise loop dropping the last element.
Baselines: `cupy` (unfused array operations, one kernel per operator), `cupy_fused` (the same
expression as one cupy.ElementwiseKernel), `torch`, `triton`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import KitError, library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance

THREADS = 256
# bias_gelu_vec4's __launch_bounds__(256, 8): at most 32 registers, so 8 blocks fill an SM.
VEC4_MAX_THREADS = 256


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
    threads = int(layout["threads"])
    if layout.get("entry") == "bias_gelu_vec4":
        return Launch(grid=vec4_grid(layout, shape), block=(threads,))
    if layout.get("entry") == "bias_gelu_flat":
        return Launch(grid=(flat_grid(layout, shape),), block=(threads,))
    return Launch(grid=(min(-(-rows * cols // threads), 2**31 - 1),), block=(threads,))


def vec4_grid(layout: Mapping[str, Any], shape: Shape) -> tuple[int, int]:
    """x over column quads, y over runs of `rows_per_thread` consecutive rows."""
    rows, cols = shape
    if int(layout["threads"]) > VEC4_MAX_THREADS:
        raise KitError(f"bias_gelu vec4 takes at most {VEC4_MAX_THREADS} threads per block (its __launch_bounds__), "
                       f"not threads={layout['threads']}")
    column_blocks = -(-(-(-cols // 4)) // int(layout["threads"]))
    return column_blocks, max(1, min(65535, -(-rows // int(layout["rows_per_thread"]))))


def flat_grid(layout: Mapping[str, Any], shape: Shape) -> int:
    """Blocks of `flat`: one per `quads * threads` quads of the flat array."""
    threads, quads = int(layout["threads"]), int(layout["quads"])
    if threads not in (64, 128, 256, 512, 1024) or quads not in (1, 2, 4):
        raise KitError(f"bias_gelu flat takes threads in 64/128/256/512/1024 (2048 / threads blocks per SM in its "
                       f"__launch_bounds__) and quads 1, 2 or 4 (32 registers), not threads={threads}, quads={quads}")
    rows, cols = shape
    return max(1, -(-rows * cols // (4 * quads * threads)))


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    if layout.get("entry") != "bias_gelu_flat":
        return ()
    if int(layout["stream"]) not in (0, 1, 2):
        raise KitError(f"bias_gelu flat: stream={layout['stream']} must be 0 (plain), 1 (evict-first loads, "
                       f"streaming stores) or 2 (L2 evict-first loads past L1, plain stores)")
    return (f"-DGELU_FLAT_QUADS={int(layout['quads'])}", f"-DGELU_FLAT_THREADS={int(layout['threads'])}",
            f"-DGELU_FLAT_STREAM={int(layout['stream'])}")


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


def cupy_fused_call(buffers: Mapping[str, Any], shape: Shape):
    """The CuPy user's fast way: one cupy.ElementwiseKernel of the whole expression, the bias
    row broadcast over the rows (explicit float32 types, so no scalar promotion can creep in).
    On NumPy inputs (the CPU tests) the same float32 arithmetic runs unfused."""
    xp = library.array_module(buffers["x"])
    x, bias = buffers["x"], buffers["bias"]
    if xp.__name__ == "numpy":
        half, one, k0, k1 = (np.float32(v) for v in (0.5, 1.0, 0.7978845608028654, 0.044715))

        def call():
            z = x + bias
            return half * z * (one + np.tanh(k0 * (z + k1 * z * z * z)))

        return call
    kernel = xp.ElementwiseKernel(
        "float32 x, float32 b", "float32 y",
        "const float z = x + b; y = 0.5f * z * (1.0f + tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z)));",
        "kernelkit_bias_gelu_fused",
    )
    return lambda: kernel(x, bias)


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
    layouts={
        "elementwise": {"threads": THREADS},
        "vec4": {"entry": "bias_gelu_vec4", "threads": THREADS, "rows_per_thread": 8},
        "flat": {"entry": "bias_gelu_flat", "threads": 128, "quads": 2, "stream": 0},
    },
    # (5, 4096): vec4's quad path with a row left over after its four-rows-in-flight loop;
    # (17, 128): three runs of 6, 6 and 5 rows, each with a remainder;
    # (3, 8193): its flat path with a scalar tail of 3 elements;
    # (40, 132): 33 column quads, so flat's bias step wraps inside a thread's quads (at 4096
    # and 128 columns a block's quads never cross a row end), and vec4 has idle column threads.
    correctness_shapes=((8, 1), (8, 31), (8, 33), (8, 127), (8, 4096), (5, 4096), (17, 128), (3, 8193), (40, 132)),
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
        "vec_tail": Mutation(
            find="i < total; i += threads",
            replace="i < total - 1; i += threads",
            why="vec4's scalar tail (total % 4 elements past the last quad) drops its last element",
        ),
        "vec_rows": Mutation(
            find="for (; count > 0; --count,",
            replace="for (; count > 1; --count,",
            why="vec4's quad path never writes the last row of a run when it falls after the four-rows-in-flight loop",
        ),
        "vec_row_bias": Mutation(
            find="reinterpret_cast<const float4*>(bias)[q]",
            replace="reinterpret_cast<const float4*>(bias)[0]",
            why="vec4's quad path adds the first bias quad to every column quad",
        ),
        "vec_bias_wrap": Mutation(
            find="c = (c + 1 == cols) ? 0 : c + 1;",
            replace="c = (c + 1 == cols) ? c : c + 1;",
            why="vec4's flat path does not wrap the bias index at a row end (it repeats the last column)",
        ),
        "flat_wrap": Mutation(
            find="if (c >= col_quads) c -= col_quads;",
            replace="if (c >= col_quads) c = 0;",
            why="flat's bias step past a row end restarts at the row's first quad instead of wrapping",
        ),
        "flat_tail": Mutation(
            find="e < total; e += stride",
            replace="e < total - 1; e += stride",
            why="flat's element-wise loop (widths not a multiple of 4) never writes the last element",
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
    # Rows a thread walks: fewer give more, shorter blocks (dynamic balance at the end of the
    # grid); more give fewer blocks and a near-single wave (8 x 4096: 4096 blocks at 8 rows).
    sweeps={"vec4": {"rows_per_thread": [4, 8, 16, 32]},
            # Quads per thread (loads in flight each) x block size x cache hints. Measured on the
            # H200 (8192x4096): 4 quads and stream 1 lost at every point, 128 threads beat 256; so
            # 1-2 quads, blocks of 64 (32 per SM), 128 and 512, plain or L2 evict-first x loads.
            "flat": {"quads": [1, 2], "threads": [64, 128, 512], "stream": [0, 2]}},
    layout_options=layout_options,
    baselines={
        "cupy": Baseline("cupy", "CuPy unfused array operations of the tanh form (one kernel per operator)", cupy_call),
        "cupy_fused": Baseline("cupy", "cupy.ElementwiseKernel of the whole tanh-form expression (one kernel)",
                               cupy_fused_call),
        "torch": Baseline("torch", "x + b, then torch.nn.functional.gelu(approximate='tanh')", torch_call),
        "triton": Baseline("triton", "triton_bias_gelu.py: one fused elementwise kernel", triton_call),
    },
)
