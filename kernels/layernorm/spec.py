"""Layer normalization with learned weight and bias, eps 1e-5 (seed 000's rewritten kernel).

Layouts: `block` (a block of 256 threads per row, shared-memory tree with barriers: the seed's
first version) and `warp` (a warp per row, eight warps per block, 128-bit loads for widths
that are multiples of 4, shuffle reductions for the mean and the centred variance: the
rewrite). Correctness widths cover both the vector and the scalar path of `warp`.

`vec` (kernel `layernorm_vec`) aims at copy speed: x is read once, with 128-bit loads, the row
stays in registers (`vec` quads per thread, a compile-time size), and both the mean and the
centred variance come from the held values (two reductions, no second read, no
E[x^2] - mean^2 cancellation). As OneFlow's layer norm does, the width picks the shape: the
fewest whole warps per row that hold it in `vec` quads each (and up to three scalars), so narrow rows get a warp per row
(`rows_per_block` rows per block, shuffles only) and wide rows a block per row (shuffles, then
one shared-memory step across warps). Rows of odd widths are misaligned, so each is read as a
scalar head to its first 16-byte boundary, quads and a scalar tail (16384x4097 still streams
through 128-bit loads). Controls aimed at `vec`: a dropped tail, empty register slots counted
in the variance, the cross-warp sum reduced to its first warp. (A removed barrier is a race
that may pass by chance; a passing control stops the workflow, so none is used.)
`stream` (kernel `layernorm_stream`) keeps vec's one read with the row in registers and
changes three things aimed at 16384x4097, where vec stays at 0.84 of the copy ceiling: (1)
weight and bias sit in shared memory in four planes by column mod 4, so a misaligned row's
quads read them conflict-free from 32 consecutive slots (vec reads four scalars of each per
quad from global memory: eight L1 accesses per quad, several times x's own traffic), loaded
once per block while the block walks rows blockIdx.x, blockIdx.x + grid, ...; (2) one
reduction and one barrier per row: each thread's (count, mean, centred sum of squares) merge
pairwise (Chan et al.: no E[x^2] - mean^2 cancellation) through xor shuffles and then across
warps, the partials double-buffered by row parity; (3) evict-first loads of x and streaming
stores of y. Fixed `threads` per row (the block) with `capacity / (4 * threads)` quads each,
and a grid that fills the H200 (132 SMs x `blocks_per_sm`, the __launch_bounds__ minimum,
fewer where the shared memory of a block allows fewer), with at least two rows per block so
that the correctness shapes walk the row loop too. Controls aimed at `stream`: the merge
without its between-group term, the weight/bias planes read without the row's head shift,
the row loop skipping rows.
`pipe` (kernel `layernorm_pipe`) is `stream` with its rows software-pipelined: a stream block
stops loading while it reduces a row, waits at the barrier and stores it, so once per row its
share of the DRAM queue drains (H200, 16384x4097: stream and vec at ~72% of DRAM peak, 151 and
149 us against a ~125 us copy). A pipe block holds two rows in two register sets and issues
the loads of its next row before the current row's moments, barrier and stores; the sets
alternate (no copies), the partials alternate with them. Same arithmetic and merge order as
stream. The weight/bias planes are filled plane by plane (stream's column-order fill writes
four planes per warp store: 4-way bank conflicts) on 128-byte-aligned plane starts; `hint`
picks evict-first/streaming x loads and y stores (1) or plain ones (0: on bias_gelu plain ones
won at every point). The grid leaves at least four rows per block, so that the correctness
shapes walk both register sets and a buffer refilled after its first use. Control aimed at
`pipe`: the prefetch re-reads the current row instead of the next.
`cupy_fused` is how a CuPy user would speed up the unfused chain (`cupy`): x.mean, then a
ReductionKernel for the centred sum of squares and an ElementwiseKernel that normalises and
scales (three kernels, three reads of x).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kernelkit.inputs import pattern_array
from kernelkit import KitError, library
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


def vec_threads(layout: Mapping[str, Any], cols: int) -> int:
    """Threads per row of `vec`: its fixed `threads`, else the fewest whole warps holding the row
    in `vec` quads each and up to three scalars (a row of 4097 takes 256 threads of 4 quads, not
    288 with 127 slots empty: more rows fit on an SM)."""
    vec = int(layout["vec"])
    if "threads" in layout:
        threads = int(layout["threads"])
    else:
        threads = 32 * max(1, -(-(cols - 3) // (4 * vec * 32)))
    if threads > int(layout["max_threads"]) or threads % 32 or 4 * vec * threads + 3 < cols:
        raise KitError(f"layernorm layout vec={vec} cannot hold a row of {cols} columns in {threads} threads "
                       f"(whole warps, at most max_threads={layout['max_threads']}, holding 4 * vec floats each and "
                       f"three more); raise vec")
    return threads


# layernorm_stream's grid fills this many SMs (the H200's); elsewhere it is still correct.
STREAM_SMS = 132
# Shared memory of an H200 SM and what the runtime reserves per block (bytes).
SM_SHARED = 233472
BLOCK_RESERVED_SHARED = 1024


def stream_vec(layout: Mapping[str, Any]) -> int:
    """Quads each thread of `stream` holds: capacity / (4 * threads), refused unless whole and the
    block can be resident `blocks_per_sm` times (threads per SM at most 2048)."""
    threads, capacity, blocks = int(layout["threads"]), int(layout["capacity"]), int(layout["blocks_per_sm"])
    if threads % 32 or not 32 <= threads <= 1024 or capacity % (4 * threads) or threads * blocks > 2048:
        raise KitError(f"layernorm stream: threads={threads} must be whole warps (32-1024) dividing capacity={capacity} "
                       f"into quads, and threads * blocks_per_sm={blocks} at most 2048 (an SM's threads)")
    return capacity // (4 * threads)


def stream_pitch(cols: int) -> int:
    """Slots per weight/bias plane of `stream`: ceil(cols / 4)."""
    return -(-cols // 4)


def pipe_pitch(cols: int) -> int:
    """Slots per weight/bias plane of `pipe`: ceil(cols / 4) rounded up to 16 (128-byte plane starts)."""
    return (-(-cols // 4) + 15) // 16 * 16


def persistent_launch(name: str, layout: Mapping[str, Any], shape: Shape, pitch: int, min_rows: int) -> Launch:
    """The launch of `stream` and `pipe`: as many blocks as stay resident, each walking at least
    `min_rows` rows, with (w, b) float2 in four planes of `pitch` slots of shared memory."""
    rows, cols = shape
    threads, vec = int(layout["threads"]), stream_vec(layout)
    if cols > 4 * vec * threads + 3:
        raise KitError(f"layernorm {name} holds rows of at most capacity + 3 = {4 * vec * threads + 3} columns, "
                       f"not {cols}; raise capacity")
    shared = 8 * 4 * pitch
    if shared > 48 * 1024:
        raise KitError(f"layernorm {name} keeps weight and bias in {shared} bytes of shared memory, over the 48 KiB "
                       f"a launch gets without opting in; {cols} columns is too wide")
    per_block = shared + 2 * (threads // 32) * 12 + BLOCK_RESERVED_SHARED
    resident = min(int(layout["blocks_per_sm"]), SM_SHARED // per_block, 32)
    return Launch(grid=(max(1, min(-(-rows // min_rows), STREAM_SMS * resident)),), block=(threads,), shared_mem=shared)


def layout_options(layout: Mapping[str, Any]) -> tuple[str, ...]:
    if layout.get("entry") == "layernorm_pipe":
        if int(layout["hint"]) not in (0, 1):
            raise KitError(f"layernorm pipe: hint={layout['hint']} must be 0 (plain loads/stores) or 1 (streaming)")
        return (f"-DLN_PIPE_THREADS={int(layout['threads'])}", f"-DLN_PIPE_VEC={stream_vec(layout)}",
                f"-DLN_PIPE_BLOCKS={int(layout['blocks_per_sm'])}", f"-DLN_PIPE_HINT={int(layout['hint'])}")
    if layout.get("entry") == "layernorm_stream":
        return (f"-DLN_STREAM_THREADS={int(layout['threads'])}", f"-DLN_STREAM_VEC={stream_vec(layout)}",
                f"-DLN_STREAM_BLOCKS={int(layout['blocks_per_sm'])}")
    if "vec" not in layout:
        return ()
    # min_blocks (a sweep's, default 1) adds the __launch_bounds__ minimum, which caps the registers
    # at 65536 / (max_threads * min_blocks); 1 leaves the options as they always were.
    min_blocks = int(layout.get("min_blocks", 1))
    return (f"-DLAYERNORM_VEC={int(layout['vec'])}", f"-DLAYERNORM_MAX_THREADS={int(layout['max_threads'])}",
            *((f"-DLAYERNORM_MIN_BLOCKS={min_blocks}",) if min_blocks != 1 else ()))


def launch(layout: Mapping[str, Any], shape: Shape) -> Launch:
    rows, cols = shape
    if layout["entry"] == "layernorm_stream":
        return persistent_launch("stream", layout, shape, stream_pitch(shape[1]), 2)
    if layout["entry"] == "layernorm_pipe":
        return persistent_launch("pipe", layout, shape, pipe_pitch(shape[1]), 4)
    if layout["entry"] == "layernorm_vec":
        threads = vec_threads(layout, cols)
        rows_per_block = int(layout["rows_per_block"]) if threads == 32 else 1
        return Launch(grid=(-(-rows // rows_per_block),), block=(threads, rows_per_block))
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


def cupy_fused_call(buffers: Mapping[str, Any], shape: Shape):
    xp = library.array_module(buffers["x"])
    x, weight, bias = buffers["x"], buffers["weight"], buffers["bias"]
    cols = np.float32(shape[1])
    if xp.__name__ == "numpy":  # the CPU tests: the same arithmetic, unfused
        def call():
            mean = x.mean(axis=1, keepdims=True)
            squares = ((x - mean) * (x - mean)).sum(axis=1, keepdims=True)
            return (x - mean) * (np.float32(1) / np.sqrt(squares / cols + np.float32(EPS))) * weight + bias

        return call
    centred_squares = xp.ReductionKernel(
        "float32 x, float32 mean", "float32 squares", "(x - mean) * (x - mean)", "a + b", "squares = a", "0",
        "kernelkit_layernorm_centred_squares",
    )
    normalise = xp.ElementwiseKernel(
        "float32 x, float32 mean, float32 squares, float32 w, float32 b, float32 cols, float32 eps", "float32 y",
        "y = (x - mean) * rsqrtf(squares / cols + eps) * w + b", "kernelkit_layernorm_normalise",
    )

    def call():
        mean = x.mean(axis=1, keepdims=True)
        squares = centred_squares(x, xp.broadcast_to(mean, x.shape), axis=1, keepdims=True)
        return normalise(x, mean, squares, weight, bias, cols, np.float32(EPS))

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
        "vec": {"entry": "layernorm_vec", "vec": 8, "rows_per_block": 4, "max_threads": 512, "min_blocks": 1},
        "stream": {"entry": "layernorm_stream", "threads": 256, "capacity": 4096, "blocks_per_sm": 4},
        "pipe": {"entry": "layernorm_pipe", "threads": 256, "capacity": 4096, "blocks_per_sm": 4, "hint": 0},
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
        "vec_tail": Mutation(
            find="const int tail = cols - head - 4 * quads;",
            replace="const int tail = vector ? 0 : cols - head - 4 * quads;",
            why="vec drops the 1-3 elements after a row's last quad (never written, not in the statistics)",
        ),
        "vec_empty_slots": Mutation(
            find="if (tid + k * threads < quads) {",
            replace="if (true) {",
            why="vec counts its empty register slots (zeros) in the centred sum of squares",
        ),
        "vec_warps": Mutation(
            find="for (int w = 0; w < warps; ++w) total",
            replace="for (int w = 0; w < 1; ++w) total",
            why="vec's cross-warp sums keep only the first warp's partial",
        ),
        "stream_delta": Mutation(
            find="m.m2 = a.m2 + b.m2 + delta * delta * (a.n * share);",
            replace="m.m2 = a.m2 + b.m2;",
            why="stream merges the threads' sums of squares without the between-group term: the variance "
                "counts only the spread inside each thread's elements",
        ),
        "stream_phase": Mutation(
            find="plane[j] = ((head + j) & 3) * pitch + ((head + j) >> 2);",
            replace="plane[j] = (j & 3) * pitch + (j >> 2);",
            why="stream reads the weight/bias planes as if every row started on a 16-byte boundary: in a "
                "misaligned row each quad gets the weight and bias of the columns `head` to its left",
        ),
        "stream_rows": Mutation(
            find="row < rows; row += gridDim.x, parity ^= 1",
            replace="row < rows; row += gridDim.x + 1, parity ^= 1",
            why="stream's row loop steps one row too far: some rows are never written",
        ),
        "pipe_prefetch": Mutation(
            find="pipe_load<VECTOR>(x + (size_t)next * cols",
            replace="pipe_load<VECTOR>(x + (size_t)row * cols",
            why="pipe's prefetch re-reads the current row into the other register set: every row after a "
                "block's first is normalised from the values of the row before it (placed at that row's head)",
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
    # Threads per row (quads each: 4096 / (4 * threads)) and blocks per SM (the launch-bounds
    # minimum, so the register cap, and the grid): rows in flight per SM against registers.
    # pipe: blocks per SM 3-4 (6 lost for stream; two rows per thread double the registers: 64 at
    # 256x4, 112-121 at 128x8, no spills) and the load/store hint.
    # vec: quads per thread (3: 352 threads per row of 4097, 4: 256, 8: 128; a row is 4 * vec *
    # threads columns and up to three scalars) against blocks per SM (the register cap: 64, 40 and
    # 32 at min_blocks 2, 3 and 4). H200, 16384x4097 (h200-limits4): vec 4 took 144.6 us at
    # min_blocks 2, 134.6 us at 3 (six rows of 256 threads per SM) and 171.0 us at 4 (spills); the
    # default vec 8 (128 threads, 72 registers) 134.8 us. Before a row could hold three scalars past
    # its quads, vec 4 took 288 threads per row and 140.3 us at min_blocks 3 (h200-limits3, retired).
    # layernorm.cu's comment on LAYERNORM_MIN_BLOCKS (92 registers) predates both.
    sweeps={"vec": {"vec": [3, 4, 8], "min_blocks": [2, 3, 4]},
            "stream": {"threads": [128, 256], "blocks_per_sm": [3, 4, 6]},
            "pipe": {"threads": [128, 256], "blocks_per_sm": [3, 4], "hint": [0, 1]}},
    layout_options=layout_options,
    baselines={
        "cupy": Baseline("cupy", "CuPy mean, subtract, square, mean, sqrt, divide, scale (one kernel each)", cupy_call),
        "cupy_fused": Baseline("cupy", "x.mean, a cupy.ReductionKernel (centred sum of squares) and a "
                               "cupy.ElementwiseKernel (normalise, scale, shift): three kernels", cupy_fused_call),
        "torch": Baseline("torch", "torch.nn.functional.layer_norm", torch_call),
        "triton": Baseline("triton", "triton_layernorm.py: a program per row, the row in registers", triton_call),
    },
)
