"""Matrix multiplication C = A B in FP32, row-major (seed 000's rewritten kernel).

Layouts: `tile16` (one output per thread from 16 x 16 shared tiles: the seed's first version)
and `reg4x4` (64 x 64 block tile, 4 x 4 outputs per thread, contraction step 32, 128-bit loads
into 16 KiB of shared memory: the rewrite). Shapes are MxNxK. Correctness includes sizes that
are multiples of no tile (33x65x17, 1000x1000x1000) and widths that force the scalar load path.
A reduction over K: the tolerance scales with sum_k |a b| (see KernelSpec.error_scale).

`tiled` (kernel `matmul_tiled`) is the warp-tiled, multi-stage design: each block computes a
bm x bn tile of C in steps of bk, the operand tiles copied global -> shared by `cp.async`
(`stages` buffers, so the copies of the next steps overlap the multiply-adds of this one);
each warp owns a wm x wn tile, each thread tm x tn sub-tiles repeated `wniter` times along n
(and as often along m as the warp tile needs), read from shared memory as 16-byte quads.
Every parameter is a compile-time constant (`-DMM_BM=...`, built by `layout_options` from the
layout's dict), so a sweep is a set of layouts with other values; `min_blocks` is the
`__launch_bounds__` occupancy asked of the register allocator. The default point (128 x 128
block tile, bk 8, 3 stages, 64 x 32 warp tiles, 8 x 4 thread tiles twice, 256 threads, two
blocks per multiprocessor: 128 registers, no spills, 25 KB of shared memory each) was picked
by reasoning (reuse per shared-memory read, occupancy, no spills); on the H200 (run h200-limits1)
it took 3.82 ms at 4096^3, and the sweep's best point (bm 128, wn 64, 2 stages) 3.68 ms.
Controls aimed at `tiled`: the last partial bk step dropped, accumulators overwritten
instead of added, the last row of C never written.

`simt` (kernel `matmul_simt`, issue 15) spends its issue slots on FFMAs: in `tiled`'s best point
(37 TFLOP/s at 4096^3) 29% of the main loop's SASS instructions were address arithmetic, checks and
register moves, which caps it at about 70% of the 67 TFLOP/s FFMA peak before any stall; in
`simt`'s loop (full k steps) FFMAs are 87-90% (nvcc 13.0, nvdisasm counts). Here every copy's
source address and predicate is set up once (rows past M clamped to row M - 1 with zero bytes
copied), a full k step adds only k0, and just the last partial k step checks k; one barrier per k
step (the stage read in the previous step is refilled after it); a warp's 32 lanes form a 4 x 8
grid and each lane owns (wm / 16) x (wn / 32) sub-tiles of 4 x 4 outputs, 16 rows and 32 columns
apart, so a warp's 16-byte fragment reads touch 4 (A, stored transposed) or 8 (B) consecutive
quads: no bank conflicts. Blocks run down bands of `group` block rows (L2 reuse). `min_blocks` for
__launch_bounds__ follows from the thread tile: 128 registers for an 8 x 8 tile (64 accumulators),
255 for 16 x 8. The default point is 128 x 128 x 8, 32 x 64 warp tiles (8 x 8 per thread), 256
threads, 3 stages, two blocks per multiprocessor; the sweep crosses 128- or 256-wide block tiles,
32- or 64-row warp tiles and 2 or 3 stages (bk 16 would pass 48 KB of static shared memory at bn
256, or spill at 8 x 8). Controls aimed at `simt`: the last partial k step dropped, every A
sub-tile read from the first one's rows, the last column never written on the scalar path.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import KitError, library
from kernelkit.spec import Baseline, KernelSpec, Launch, Mutation, Shape, Tolerance


def make_inputs(shape: Shape, pattern: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m, n, k = shape
    return {"a": pattern_array(pattern, (m, k), rng), "b": pattern_array(pattern, (k, n), rng)}


def reference(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)


def error_scale(inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))


TILED_PARAMETERS = ("bm", "bn", "bk", "wm", "wn", "tm", "tn", "wniter", "stages", "min_blocks")


def tiled_threads(layout: Mapping[str, Any]) -> int:
    """Threads of a `tiled` block, after the checks the kernel's static_asserts make, so that a
    bad parameter point is refused in one sentence before any compile."""
    p = {name: int(layout[name]) for name in TILED_PARAMETERS}
    threads = (p["bm"] // p["wm"]) * (p["bn"] // p["wn"]) * 32
    wmiter = p["wm"] * p["wn"] // (32 * p["tm"] * p["tn"] * p["wniter"])
    problems = [
        text for text, bad in (
            ("wm and wn must divide bm and bn", p["bm"] % p["wm"] or p["bn"] % p["wn"]),
            ("at most 1024 threads", threads > 1024),
            ("the warp tile must hold whole 32-lane sub-tiles",
             wmiter < 1 or p["wm"] % wmiter or p["wn"] % p["wniter"]
             or (p["wm"] // max(wmiter, 1) // p["tm"]) * (p["wn"] // p["wniter"] // p["tn"]) != 32),
            ("tm and tn must be multiples of 4", p["tm"] % 4 or p["tn"] % 4),
            ("the tiles must split evenly over the threads",
             (p["bm"] * p["bk"]) % threads or (p["bk"] * p["bn"]) % (4 * threads)),
            ("at least 2 stages", p["stages"] < 2),
            ("at most 48 KB of static shared memory", p["stages"] * p["bk"] * (p["bm"] + 4 + p["bn"]) * 4 > 48 * 1024),
        ) if bad
    ]
    if problems:
        raise KitError(f"matmul tiled parameters {p} are not a valid point: {'; '.join(problems)}")
    return threads


SIMT_PARAMETERS = ("bm", "bn", "bk", "wm", "wn", "stages", "group")


def simt_threads(layout: Mapping[str, Any]) -> int:
    """Threads of a `simt` block, after the checks matmul_simt's static_asserts make."""
    p = {name: int(layout[name]) for name in SIMT_PARAMETERS}
    threads = (p["bm"] // max(p["wm"], 1)) * (p["bn"] // max(p["wn"], 1)) * 32
    problems = [
        text for text, bad in (
            ("warp tiles of 4 x 4 sub-tiles: wm a multiple of 16, wn of 32, dividing bm and bn",
             p["wm"] % 16 or p["wn"] % 32 or p["bm"] % p["wm"] or p["bn"] % p["wn"]),
            ("at most 1024 threads", threads > 1024),
            ("bk a multiple of 8", p["bk"] % 8 or p["bk"] < 8),
            ("the copies must split evenly over the threads",
             (8 * p["bm"]) % threads or p["bm"] * p["bk"] < threads or threads % (p["bn"] // 4)
             or (p["bk"] * p["bn"] // 4) % threads or p["bk"] * p["bn"] // 4 < threads),
            ("2 or more stages in 48 KB of static shared memory",
             p["stages"] < 2 or p["stages"] * p["bk"] * (p["bm"] + 4 + p["bn"]) * 4 > 48 * 1024),
            ("group at least 1", p["group"] < 1),
        ) if bad
    ]
    if problems:
        raise KitError(f"matmul simt parameters {p} are not a valid point: {'; '.join(problems)}")
    return threads


def simt_min_blocks(layout: Mapping[str, Any]) -> int:
    """Blocks per multiprocessor asked of the register allocator: 128 registers a thread hold an
    8 x 8 tile (64 accumulators) without spilling, a larger tile takes up to 255."""
    threads = simt_threads(layout)
    accumulators = (int(layout["wm"]) // 4) * (int(layout["wn"]) // 8)
    return max(1, 65536 // (threads * (128 if accumulators <= 64 else 256)))


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    if layout.get("entry") == "matmul_simt":
        return (*(f"-DMS_{name.upper()}={int(layout[name])}" for name in SIMT_PARAMETERS),
                f"-DMS_MIN_BLOCKS={simt_min_blocks(layout)}")
    if layout.get("entry") != "matmul_tiled":
        return ()
    return tuple(f"-DMM_{name.upper()}={int(layout[name])}" for name in TILED_PARAMETERS)


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    m, n, _ = shape
    if layout.get("entry") == "matmul_tiled":
        return Launch(grid=(-(-n // int(layout["bn"])), -(-m // int(layout["bm"]))), block=(tiled_threads(layout),))
    if layout.get("entry") == "matmul_simt":
        return Launch(grid=(-(-n // int(layout["bn"])), -(-m // int(layout["bm"]))), block=(simt_threads(layout),))
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
        "tiled": {"entry": "matmul_tiled", "bm": 128, "bn": 128, "bk": 8, "wm": 64, "wn": 32, "tm": 8, "tn": 4,
                  "wniter": 2, "stages": 3, "min_blocks": 2},
        "simt": {"entry": "matmul_simt", "bm": 128, "bn": 128, "bk": 8, "wm": 32, "wn": 64, "stages": 3, "group": 8},
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
        "tiled_k_tail": Mutation(
            find="const int tiles = (K + MM_BK - 1) / MM_BK;",
            replace="const int tiles = K / MM_BK;",
            why="tiled drops the last partial bk step of the contraction",
        ),
        "tiled_overwrite": Mutation(
            find="acc[m][n] += a_reg[m] * b_reg[n];",
            replace="acc[m][n] = a_reg[m] * b_reg[n];",
            why="tiled overwrites its accumulators instead of adding to them",
        ),
        "tiled_last_row": Mutation(
            find="if (row >= M) continue;",
            replace="if (row >= M - 1) continue;",
            why="tiled never writes the last row of C",
        ),
        "simt_k_tail": Mutation(
            find="const int tiles = (K + MS_BK - 1) / MS_BK;",
            replace="const int tiles = K / MS_BK;",
            why="simt drops the last partial bk step of the contraction",
        ),
        "simt_fragment": Mutation(
            find="as + kk * MS_AS + 16 * s)",
            replace="as + kk * MS_AS)",
            why="simt reads every A sub-tile of a thread from the first one's rows (a wrong shared-memory index)",
        ),
        "simt_last_column": Mutation(
            find="if (col + e < N) out[e] = acc[i][4 * s + e];",
            replace="if (col + e < N - 1) out[e] = acc[i][4 * s + e];",
            why="simt's scalar path (N not a multiple of 4) never writes the last column of C",
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
    layout_options=layout_options,
    # Around the default point: 64 or 128 rows per block, 64 x 32 or 64 x 64 warp tiles (64 or
    # 128 outputs a thread), 2 to 4 stages; every point is valid and compiles without spills.
    # bk 16 is left out: with 3 or more stages at bm 128 it passes the 48 KB of static shared memory.
    # simt: 128 x 128 or 128 x 256 block tiles, 8 x 8 (256 or 512 threads, 128 registers) or
    # 16 x 8 (128 or 256 threads, up to 255 registers) per thread, 2 or 3 stages; every point
    # compiles for sm_90 without spills.
    sweeps={"tiled": {"bm": [64, 128], "wn": [32, 64], "stages": [2, 3, 4]},
            "simt": {"bn": [128, 256], "wm": [32, 64], "stages": [2, 3]}},
    baselines={
        "cupy": Baseline("cupy", "cupy.matmul (cuBLAS SGEMM)", cupy_call),
        "torch": Baseline("torch", "torch.matmul (cuBLAS, TF32 off)", torch_call),
        "triton": Baseline("triton", "triton_matmul.py: 64x64 tiles, K step 32, IEEE FP32 dot", triton_call),
    },
)
