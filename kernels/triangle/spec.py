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

`tiled` (kernel `triangle_tiled`) treats each channel as its own SGEMM and moves the channel
dimension out of the way on the copy into shared memory: a block owns ti x tj outputs of 8
channels (8 channels = one whole 32-byte sector per (row, k) in global memory) and copies each
step of bk k with 4-byte cp.async into [k][channel][row] tiles (rows padded by 4 floats, so a
warp's 32 copies hit 32 banks), `stages` buffers deep. Each thread then owns an 8 x 8 (i x j)
tile of ONE channel and reads it per k as four 16-byte quads: 64 multiply-adds per 4 shared
loads (batched: 64 per 8), the quads broadcast within the warp (a warp holds one channel). The
64 x 64 block tile reads 8 multiply-adds' worth of work per byte from L2 (batched's 32 x 32: 4).
Results go back through shared memory so that warps store whole 32-byte runs of 8 channels.
512 threads (ti = tj = 64) run one block per multiprocessor at <= 128 registers; 256 threads
(tj = 32) two. The default point (tile "64x64", pipeline "4x2" = bk 4 x 2 stages: 121 registers, no spills,
34 KB of static shared memory) was chosen by reasoning: on the H200 (run h200-limits1) it took
178.6 us, and the sweep's fastest point (tile 64x32, pipeline 2x4) 165.5 us; the sweep spans tile
shape, step and depth within the 48 KB of static shared memory. Controls aimed at `tiled`: the last partial bk step
dropped, the second j quad of every thread multiplied with the first quad's b values.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import KitError, library
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


def tiled_parameters(layout: Mapping[str, Any]) -> dict[str, int]:
    """ti, tj, bk and stages of a `tiled` layout, written as tile "TIxTJ" and pipeline "BKxSTAGES"
    (two parameters, so that a sweep grid of them holds only points that fit in shared memory)."""
    ti, tj = (int(v) for v in str(layout["tile"]).split("x"))
    bk, stages = (int(v) for v in str(layout["pipeline"]).split("x"))
    return {"ti": ti, "tj": tj, "bk": bk, "stages": stages}


def tiled_threads(layout: Mapping[str, Any]) -> int:
    """Threads of a `tiled` block after the checks the kernel's static_asserts make (so a bad point
    is refused in one sentence before any compile); 8 channels per block, 8 x 8 outputs a thread."""
    p = tiled_parameters(layout)
    ti, tj, bk, stages = p["ti"], p["tj"], p["bk"], p["stages"]
    gi, gj = ti // 8, tj // 8
    smem = stages * bk * 8 * (ti + 4 + tj + 4)
    istr = tj + (16 if gj < 8 else 0)
    problems = [
        text for text, bad in (
            ("ti and tj must be multiples of 32", ti % 32 or tj % 32 or ti < 32 or tj < 32),
            ("a warp must hold one channel", (gi * gj) % 32),
            ("at most 512 threads (8 channels x ti/8 x tj/8)", 8 * gi * gj > 512),
            ("at least 2 stages", stages < 2),
            ("at least 1 k per step", bk < 1),
            ("at most 48 KB of static shared memory", smem * 4 > 48 * 1024),
            ("the epilogue's staging must fit the tiles' shared memory", 8 * (gi * istr + 4) > smem),
        ) if bad
    ]
    if problems:
        raise KitError(f"triangle tiled parameters {p} are not a valid point: {'; '.join(problems)}")
    return 8 * gi * gj


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    if layout.get("entry") == "triangle_tiled":
        return tuple(f"-DTRT_{name.upper()}={value}" for name, value in tiled_parameters(layout).items())
    return (f"-DTRI_MIN_BLOCKS={int(layout['min_blocks'])}",) if "min_blocks" in layout else ()


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    n, channels = shape
    if layout.get("entry") == "triangle_tiled":
        threads, p = tiled_threads(layout), tiled_parameters(layout)
        if n * n * channels >= 2**31:
            raise KitError(f"triangle tiled keeps 32-bit element offsets: n * n * channels = {n * n * channels} must stay "
                           "below 2^31")
        return Launch(grid=(-(-n // p["tj"]), -(-n // p["ti"]), -(-channels // 8)), block=(threads,))
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
    layouts={"direct": {"threads": THREADS}, "batched": {"entry": "triangle_batched", "threads": 256, "min_blocks": 1},
             "tiled": {"entry": "triangle_tiled", "tile": "64x64", "pipeline": "4x2"}},
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
        "tiled_k_tail": Mutation(
            find="const int k_tiles = (n + TRT_BK - 1) / TRT_BK;",
            replace="const int k_tiles = n / TRT_BK;",
            why="tiled drops the last partial step of bk k",
        ),
        "tiled_half": Mutation(
            find="bs + kk * TRT_CB * TRT_BROW + TRT_TJ / 2)",
            replace="bs + kk * TRT_CB * TRT_BROW)",
            why="tiled multiplies each thread's second j quad with the first quad's b values",
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
    layout_options=layout_options,
    # Around the default point: tiles (ti x tj) of 64 x 64 (512 threads, one block a multiprocessor),
    # 64 x 32 (256, two) and 128 x 32 (512); pipelines (bk x stages) of 4 k x 2 stages, 2 k x 3 and
    # 2 k x 4 (the deepest that fit 48 KB next to the 64 x 64 and 128 x 32 tiles). All 9 points are
    # valid and compile to <= 128 registers without spills.
    sweeps={"tiled": {"tile": ["64x64", "64x32", "128x32"], "pipeline": ["4x2", "2x3", "2x4"]}},
    baselines={
        "cupy": Baseline("cupy", "cupy.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS)", cupy_call),
        "torch": Baseline("torch", "torch.einsum('ikc,jkc->ijc') (transposes + batched cuBLAS, TF32 off)", torch_call),
        "triton": Baseline("triton", "triton_triangle.py: a program per (i, 32 j, 32 c), sum over k", triton_call),
    },
)
