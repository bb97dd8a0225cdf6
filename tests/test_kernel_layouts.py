"""Index coverage of particular hand-written layouts, on the CPU: their threads' index formulas,
transcribed, cover each output (and each staged tile) exactly once at the launch the spec picks.

These know their kernels by name, unlike test_operations.py; the row split of rmsnorm/layernorm
vec is the one their emulations (kernels/rmsnorm/emulation.py) use.
"""

from __future__ import annotations

import itertools

import numpy as np

import pytest
from conftest import default_config

from kernelkit import KitError
from kernelkit import spec as specs


def test_triangle_batched_thread_tiles_and_staging_cover_the_block_tile_once():
    """triangle_batched's index formulas: 256 threads x (4 i x 4 j x 4 channels) cover the
    32 x 32 x 16 output tile once, and 1024 staged quads per operand cover 32 rows x 8 k x 4 quads once."""
    outputs, staged = set(), set()
    for tid in range(256):
        lane, warp = tid & 31, tid >> 5
        cq, ig, jg = lane & 3, ((warp & 3) << 1) | ((lane >> 2) & 1), ((warp >> 2) << 2) | (lane >> 3)
        outputs |= {(ig + 8 * r, jg + 8 * s, cq * 4 + c) for r in range(4) for s in range(4) for c in range(4)}
        for l in range(4):
            f = tid + 256 * l
            staged.add((f >> 5, (f >> 2) & 7, f & 3))
    assert len(outputs) == 256 * 64 and outputs == {(i, j, c) for i in range(32) for j in range(32) for c in range(16)}
    assert staged == {(row, k, q) for row in range(32) for k in range(8) for q in range(4)}


def sweep_points(kernel: str, layout: str) -> list[dict]:
    """Every point of the grid the spec declares for `layout` (the product of its values)."""
    grid = specs.load(kernel).sweeps.get(layout, {})
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


SWEPT = [(kernel, layout) for kernel in specs.available() for layout in specs.load(kernel).sweeps]


def test_matmul_and_rmsnorm_declare_sweeps_over_existing_layouts():
    assert {("matmul", "tiled"), ("rmsnorm", "vec")} <= set(SWEPT)
    for kernel, layout in SWEPT:
        spec = specs.load(kernel)
        assert layout in spec.layouts and set(spec.sweeps[layout]) <= set(spec.layouts[layout])
        assert 4 <= len(sweep_points(kernel, layout)) <= 24


@pytest.mark.parametrize("kernel, layout", SWEPT)
def test_every_sweep_point_launches_at_every_default_and_correctness_shape(kernel, layout):
    """A point the GPU would refuse at a shape the run times is a hole in the sweep: each point
    must pass the spec's own checks (launch) at every such shape; and no two points may be the
    same build with the same launches, or the sweep times one kernel twice under two names."""
    spec = specs.load(kernel)
    shapes = sorted({spec.parse_shape(text) for text in default_config()["kernels"][kernel]["shapes"]})
    signatures = set()
    for point in sweep_points(kernel, layout):
        parameters = {**spec.layout(layout), **point}
        launches = tuple(spec.launch(parameters, shape) for shape in (*spec.correctness_shapes, *shapes))
        signatures.add((spec.layout_options(parameters), launches))
    assert len(signatures) == len(sweep_points(kernel, layout))


TILED_POINTS = [
    {},  # the spec's default point
    {"bm": 64, "bn": 128, "bk": 16, "wm": 32, "wn": 64, "tm": 4, "tn": 8, "wniter": 2, "stages": 2},
    {"bm": 128, "bn": 64, "bk": 16, "wm": 64, "wn": 32, "tm": 8, "tn": 4, "wniter": 1, "stages": 2},
    {"bm": 64, "bn": 64, "bk": 8, "wm": 32, "wn": 32, "tm": 4, "tn": 4, "wniter": 1, "stages": 4},
    *sweep_points("matmul", "tiled"),
]


@pytest.mark.parametrize("point", TILED_POINTS)
def test_matmul_tiled_threads_cover_the_block_tile_and_the_staged_tiles_once(point):
    """matmul_tiled's index formulas at several parameter points: every output of the bm x bn
    tile belongs to one thread, and the copies fill every element of the A and B tiles once."""
    spec = specs.load("matmul")
    layout = {**spec.layout("tiled"), **point}
    threads = spec.launch(layout, (256, 256, 256)).block[0]
    bm, bn, bk, wm, wn, tm, tn, wniter = (int(layout[k]) for k in ("bm", "bn", "bk", "wm", "wn", "tm", "tn", "wniter"))
    wmiter = wm * wn // (32 * tm * tn * wniter)
    wsubm, wsubn = wm // wmiter, wn // wniter
    outputs, a_tile, b_tile = [], [], []
    for tid in range(threads):
        lane, warp = tid & 31, tid >> 5
        warp_n, warp_m = warp % (bn // wn), warp // (bn // wn)
        lane_n, lane_m = lane % (wsubn // tn), lane // (wsubn // tn)
        outputs += [(warp_m * wm + im * wsubm + lane_m * tm + i, warp_n * wn + jn * wsubn + lane_n * tn + j)
                    for im in range(wmiter) for i in range(tm) for jn in range(wniter) for j in range(tn)]
        a_tile += [((tid + l * threads) // bk, (tid + l * threads) % bk) for l in range(bm * bk // threads)]
        b_tile += [((tid + l * threads) // (bn // 4), (tid + l * threads) % (bn // 4) * 4)
                   for l in range(bk * bn // 4 // threads)]
    assert sorted(outputs) == [(m, n) for m in range(bm) for n in range(bn)]
    assert sorted(a_tile) == [(m, k) for m in range(bm) for k in range(bk)]
    assert sorted(b_tile) == [(k, n) for k in range(bk) for n in range(0, bn, 4)]


@pytest.mark.parametrize("point", [{}, {"bk": 16, "wm": 64, "stages": 2}, *sweep_points("matmul", "simt")])
def test_matmul_simt_threads_cover_the_block_tile_and_the_staged_tiles_once(point):
    """matmul_simt's index formulas: 4 x 8 lanes of (wm / 16) x (wn / 32) sub-tiles of 4 x 4 cover
    the bm x bn tile once; the A copies (a_m + A_ROW(l), a_k + A_COL(l)) and the B quads
    (b_k + l * B_ROWS, b_n) fill every element of the staged tiles once."""
    spec = specs.load("matmul")
    layout = {**spec.layout("simt"), **point}
    threads = spec.launch(layout, (256, 256, 256)).block[0]
    bm, bn, bk, wm, wn = (int(layout[k]) for k in ("bm", "bn", "bk", "wm", "wn"))
    outputs, a_tile, b_tile = [], [], []
    for tid in range(threads):
        lane, warp = tid & 31, tid >> 5
        a_frag = warp // (bn // wn) * wm + (lane >> 3) * 4
        b_frag = warp % (bn // wn) * wn + (lane & 7) * 4
        outputs += [(a_frag + 16 * (i // 4) + i % 4, b_frag + 32 * s + e)
                    for i in range(wm // 4) for s in range(wn // 32) for e in range(4)]
        a_tile += [((tid >> 3) + l * threads % (8 * bm) // 8, (tid & 7) + 8 * (l * threads // (8 * bm)))
                   for l in range(bm * bk // threads)]
        b_tile += [(tid // (bn // 4) + l * (threads // (bn // 4)), tid % (bn // 4) * 4) for l in range(bk * bn // 4 // threads)]
    assert sorted(outputs) == [(m, n) for m in range(bm) for n in range(bn)]
    assert sorted(a_tile) == [(m, k) for m in range(bm) for k in range(bk)]
    assert sorted(b_tile) == [(k, n) for k in range(bk) for n in range(0, bn, 4)]


@pytest.mark.parametrize("columns, rows, group", [(1, 1, 8), (8, 8, 8), (32, 32, 8), (3, 11, 4), (5, 2, 8)])
def test_matmul_simt_band_order_takes_every_tile_once(columns, rows, group):
    """matmul_simt's block order (bands of `group` block rows, the last band shorter) is a permutation."""
    tiles = []
    for b in range(columns * rows):
        first, local = b // (group * columns) * group, b % (group * columns)
        band_rows = min(group, rows - first)
        tiles.append((first + local % band_rows, local // band_rows))
    assert sorted(tiles) == [(r, c) for r in range(rows) for c in range(columns)]


def test_matmul_simt_refuses_an_invalid_point_in_one_sentence():
    spec = specs.load("matmul")
    with pytest.raises(KitError, match="not a valid point: .*48 KB"):
        spec.launch({**spec.layout("simt"), "bn": 256, "bk": 16, "stages": 2}, (64, 64, 64))


def test_matmul_tiled_refuses_an_invalid_point_in_one_sentence():
    spec = specs.load("matmul")
    with pytest.raises(KitError, match="not a valid point: .*multiples of 4"):
        spec.launch({**spec.layout("tiled"), "tm": 6}, (64, 64, 64))


@pytest.mark.parametrize("kernel", ["rmsnorm", "layernorm"])
def test_vec_row_split_holds_every_column_once_on_both_paths(kernel):
    """The row split the vec emulations use (rmsnorm's vec_row_parts asserts no column is held
    twice) holds every column, on the vector path and on the scalar fallback, at each launch."""
    spec = specs.load(kernel)
    own = specs.load_emulation(spec).__globals__["vec_row_parts"]
    vec_row_parts = own() if kernel == "layernorm" else own  # layernorm's: rmsnorm's, with its scalar columns past the registers
    vec = spec.layout("vec")["vec"]
    for cols in (1, 3, 4, 5, 31, 33, 127, 128, 4096, 4097, 8193, 16384):
        threads = spec.launch(spec.layout("vec"), (8, cols)).block[0]
        for row in range(4):
            for vector in (True, False):
                assert sorted(vec_row_parts(row, cols, threads, vec, vector)) == list(range(cols)), (cols, row, vector)


def stream_held_columns(cols: int, threads: int, vec: int, head: int, vector: bool) -> list[list[int]]:
    """layernorm_stream's columns per thread, from its index formulas: on the vector path the
    head (tid < head), quads tid + k * threads and the tail; on the scalar path columns
    (4k + j) * threads + tid and 4 * vec * threads + tid."""
    held: list[list[int]] = [[] for _ in range(threads)]
    quads = (cols - head) // 4 if vector else 0
    for tid in range(threads):
        t_col = head + 4 * quads + tid if vector else 4 * vec * threads + tid
        held[tid] += [tid] if vector and tid < head else []
        held[tid] += [t_col] if t_col < cols else []
        for k in range(vec):
            for j in range(4):
                c = head + 4 * (tid + k * threads) + j if vector else (4 * k + j) * threads + tid
                held[tid] += [c] if (tid + k * threads < quads if vector else c < cols) else []
    return held


def merge_moments(a, b):
    """layernorm_stream's merge_moments in float32, on arrays of lanes."""
    n = a[0] + b[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n == 0, np.float32(0), b[0] / n).astype(np.float32)
    delta = b[1] - a[1]
    merged = (n, a[1] + delta * share, a[2] + b[2] + delta * delta * (a[0] * share))
    return tuple(np.where(n == 0, a_part, m_part).astype(np.float32) for a_part, m_part in zip(a, merged))


@pytest.mark.parametrize("point", [{}, *sweep_points("layernorm", "stream")])
def test_layernorm_stream_holds_each_column_once_and_its_merges_give_the_row_moments(point):
    """Every column once on both paths at each head, and the kernel's order of merges (xor
    shuffles with the lower lane first, then warps in order) gives the same bits on every lane
    and the row's mean and centred variance."""
    spec = specs.load("layernorm")
    layout = {**spec.layout("stream"), **point}
    threads, vec = int(layout["threads"]), int(layout["capacity"]) // (4 * int(layout["threads"]))
    rng = np.random.default_rng(0)
    for cols in (1, 3, 5, 31, 33, 127, 1024, 4096, 4097, 4 * vec * threads + 3):
        spec.launch(layout, (8, cols))
        x = (3.0 + rng.standard_normal(cols)).astype(np.float32)
        for head, vector in [(h, True) for h in range(min(cols, 3) + 1)] + [(0, False)]:
            held = stream_held_columns(cols, threads, vec, head, vector)
            assert sorted(c for columns in held for c in columns) == list(range(cols)), (cols, head, vector)
            n = np.array([len(c) for c in held], dtype=np.float32)
            sums = np.array([x[c].sum(dtype=np.float32) for c in held], dtype=np.float32)
            mean = np.where(n > 0, sums / np.maximum(n, 1), 0).astype(np.float32)
            m2 = np.array([((x[c] - m) ** 2).sum(dtype=np.float32) for c, m in zip(held, mean)], dtype=np.float32)
            lanes = np.arange(threads)
            mine = (n, mean, m2)
            for mask in (1, 2, 4, 8, 16):
                other = tuple(part[lanes ^ mask] for part in mine)
                upper = (lanes & mask) != 0
                first = tuple(np.where(upper, o, m) for o, m in zip(other, mine))
                second = tuple(np.where(upper, m, o) for o, m in zip(other, mine))
                mine = merge_moments(first, second)
            for part in mine:
                assert (part.reshape(-1, 32) == part.reshape(-1, 32)[:, :1]).all()  # one value per warp
            total = tuple(part[:1] for part in mine)
            for warp in range(1, threads // 32):
                total = merge_moments(total, tuple(part[32 * warp : 32 * warp + 1] for part in mine))
            assert total[0][0] == cols
            np.testing.assert_allclose(total[1][0], x.astype(np.float64).mean(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(total[2][0] / cols, x.astype(np.float64).var(), rtol=1e-5)


@pytest.mark.parametrize("point", [{}, *sweep_points("bias_gelu", "flat")])
def test_bias_gelu_flat_covers_every_quad_once_with_its_own_bias_quad(point):
    """bias_gelu_flat's quad path at the launch the spec picks: quads first + k * threads
    (first = block * quads * threads + t) cover the flat array once, and the stepped, wrapping
    bias index equals the quad's column quad."""
    spec = specs.load("bias_gelu")
    layout = {**spec.layout("flat"), **point}
    threads, per_thread = int(layout["threads"]), int(layout["quads"])
    shapes = {spec.parse_shape(text) for text in default_config()["kernels"]["bias_gelu"]["shapes"]}
    for rows, cols in sorted({*spec.correctness_shapes, *shapes}):
        if cols % 4:
            continue
        blocks = spec.launch(layout, (rows, cols)).grid[0]
        col_quads, quads = cols // 4, rows * cols // 4
        first = (np.arange(blocks, dtype=np.int64)[:, None] * per_thread * threads + np.arange(threads)).reshape(-1)
        c = first % col_quads
        seen = np.zeros(quads, dtype=np.int64)
        for k in range(per_thread):
            q = first + k * threads
            inside = q < quads
            assert (c[inside] == q[inside] % col_quads).all(), (rows, cols, k)
            np.add.at(seen, q[inside], 1)
            c = c + threads % col_quads
            c = np.where(c >= col_quads, c - col_quads, c)
        assert (seen == 1).all(), (rows, cols)
def test_triangle_tiled_emulation_of_every_sweep_point_is_right_at_every_correctness_shape():
    """triangle_tiled's index formulas, run block by block in kernels/triangle/emulation.py (shared
    memory filled with NaN before each fill, so an element read but never copied shows), at every
    valid point of its sweep: the copies' transposition, the pipeline's stages and the epilogue's
    passes depend on the tile shape, the step and the depth."""
    from conftest import padded_output
    from kernelkit.output_check import check_case
    from kernelkit.inputs import rng_for

    spec = specs.load("triangle")
    emulation = specs._module("triangle_emulation_points", spec.folder / specs.EMULATION_FILE)
    points = [spec.layout("tiled"), *(parameters for _, parameters in spec.sweep("tiled").valid)]
    assert len(points) == 10
    for shape in spec.correctness_shapes:
        inputs = spec.make_inputs(shape, "normal", rng_for("triangle", specs.shape_name(shape), "normal"))
        ref, scale = spec.reference(inputs), spec.error_scale(inputs)
        for point in points:
            verdict = check_case(padded_output(*emulation.emulate_tiled(inputs, point)), ref, spec.tolerance, scale=scale)
            assert verdict["passed"], (shape, point, verdict)


@pytest.mark.parametrize("unroll", [2, 4, 8])
def test_neighbor_warp_hint_emulation_at_every_unroll_passes_and_its_controls_are_caught(unroll):
    """neighbor_warp_hint's groups of `unroll` rows and its padded last group, at each unroll of its
    sweep: right at every correctness shape, and each of its controls fails at least one."""
    from conftest import padded_output
    from kernelkit.output_check import check_case
    from kernelkit.inputs import rng_for

    spec = specs.load("neighbor")
    assert spec.sweeps["warp_hint"]["unroll"] == [2, 4, 8]
    emulation = specs._module("neighbor_emulation_points", spec.folder / specs.EMULATION_FILE)
    caught = {"hint_remainder": 0, "hint_last_quad": 0}
    for shape in spec.correctness_shapes:
        inputs = spec.make_inputs(shape, "normal", rng_for("neighbor", specs.shape_name(shape), "normal"))
        ref, scale = spec.reference(inputs), spec.error_scale(inputs)
        verdict = check_case(padded_output(*emulation.emulate_warp_hint(inputs, None, unroll)), ref, spec.tolerance,
                             scale=scale)
        assert verdict["passed"], (shape, unroll, verdict)
        for control in caught:
            mutated = padded_output(*emulation.emulate_warp_hint(inputs, control, unroll))
            caught[control] += not check_case(mutated, ref, spec.tolerance, scale=scale)["passed"]
    assert all(caught.values()), caught


@pytest.mark.parametrize("lanes, unroll", [(lanes, unroll) for lanes in (32, 64, 128) for unroll in (2, 4)])
def test_neighbor_node_split_emulation_at_every_sweep_point_passes_and_its_controls_are_caught(lanes, unroll):
    """neighbor_node_split's walk (warp_hint's groups, every one predicated) and its row split over
    the node's warps (a ceil chunk of vectors each), at each point of its sweep: right at every
    correctness shape, each of its controls fails at least one, and the split writes every vector once."""
    from conftest import padded_output
    from kernelkit.output_check import check_case
    from kernelkit.inputs import rng_for

    spec = specs.load("neighbor")
    assert spec.sweeps["node_split"] == {"lanes": [32, 64, 128], "unroll": [2, 4]}
    emulation = specs._module("neighbor_emulation_split", spec.folder / specs.EMULATION_FILE)
    caught = {"split_batch_end": 0, "split_chunk": 0}
    for shape in spec.correctness_shapes:
        inputs = spec.make_inputs(shape, "normal", rng_for("neighbor", specs.shape_name(shape), "normal"))
        ref, scale = spec.reference(inputs), spec.error_scale(inputs)
        verdict = check_case(padded_output(*emulation.emulate_node_split(inputs, None, unroll, lanes)), ref,
                             spec.tolerance, scale=scale)
        assert verdict["passed"], (shape, lanes, unroll, verdict)
        for control in caught:
            mutated = padded_output(*emulation.emulate_node_split(inputs, control, unroll, lanes))
            caught[control] += not check_case(mutated, ref, spec.tolerance, scale=scale)["passed"]
        # The kernel's thread formulas: lane t of warp w holds vector w * chunk + p + t for p = 0, 32, ...
        vec = 128 // lanes if shape[1] % (128 // lanes) == 0 else 1
        row_len, warps = shape[1] // vec, lanes // 32
        chunk = -(-row_len // warps)
        held = [w * chunk + p + t for w in range(warps) for p in range(0, chunk, 32) for t in range(32)
                if p + t < chunk and w * chunk + p + t < row_len]
        assert sorted(held) == list(range(row_len))
    # At one warp a node there is no split to round down: the chunk control is aimed at 2 and 4 warps.
    assert caught["split_batch_end"] and (caught["split_chunk"] or lanes == 32), caught


@pytest.mark.parametrize("point", [{}, *sweep_points("layernorm", "pipe")])
def test_layernorm_pipe_walks_every_row_once_and_reads_only_filled_plane_slots(point):
    """layernorm_pipe's row walk (steps on rows blockIdx.x + i * grid, two per trip with a break
    between) writes every row once at the launch the spec picks, the correctness shapes refill a
    register set after its first row (a block walks three rows or more), and every plane slot its
    quads and scalars read was filled by the plane-by-plane fill inside the launch's shared memory."""
    spec = specs.load("layernorm")
    layout = {**spec.layout("pipe"), **point}
    shapes = {spec.parse_shape(text) for text in default_config()["kernels"]["layernorm"]["shapes"]}
    for rows, cols in sorted({*spec.correctness_shapes, *shapes}):
        launch = spec.launch(layout, (rows, cols))
        grid = launch.grid[0]
        walked = []
        for block in range(grid):
            row = block
            while row < rows:
                walked.append(row)
                if row + grid >= rows:
                    break
                walked.append(row + grid)
                row += 2 * grid
        assert sorted(walked) == list(range(rows)), (rows, cols)
        if (rows, cols) in spec.correctness_shapes and cols > 1:
            assert -(-rows // grid) >= 3, (rows, cols, grid)
    threads = int(layout["threads"])
    vec = int(layout["capacity"]) // (4 * threads)
    for cols in (1, 3, 5, 31, 33, 127, 1024, 4096, 4097):
        pitch = (((cols + 3) >> 2) + 15) & ~15
        assert 8 * 4 * pitch == spec.launch(layout, (8, cols)).shared_mem
        filled = {plane * pitch + s for plane in range(4) for s in range(pitch) if 4 * s + plane < cols}
        assert filled == {(c & 3) * pitch + (c >> 2) for c in range(cols)}
        for head in range(min(cols, 3) + 1):
            quads = (cols - head) // 4
            slots = [((head + j) & 3) * pitch + ((head + j) >> 2) for j in range(4)]
            read = {slots[j] + q for q in range(quads) for j in range(4)}
            assert read <= filled and len(read) == 4 * quads, (cols, head)
            assert quads <= vec * threads
