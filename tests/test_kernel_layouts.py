"""Index coverage of particular hand-written layouts, on the CPU: their threads' index formulas,
transcribed, cover each output (and each staged tile) exactly once at the launch the spec picks.

These know their kernels by name, unlike test_operations.py; the row split of rmsnorm/layernorm
vec is the one their emulations (kernels/rmsnorm/emulation.py) use.
"""

from __future__ import annotations

import itertools

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
    vec_row_parts = specs.load_emulation(specs.load("rmsnorm")).__globals__["vec_row_parts"]
    vec = spec.layout("vec")["vec"]
    for cols in (1, 3, 4, 5, 31, 33, 127, 128, 4096, 4097, 8193, 16384):
        threads = spec.launch(spec.layout("vec"), (8, cols)).block[0]
        for row in range(4):
            for vector in (True, False):
                assert sorted(vec_row_parts(row, cols, threads, vec, vector)) == list(range(cols)), (cols, row, vector)
