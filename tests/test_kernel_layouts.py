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


def test_triangle_tiled_emulation_of_every_sweep_point_is_right_at_every_correctness_shape():
    """triangle_tiled's index formulas, run block by block in kernels/triangle/emulation.py (shared
    memory filled with NaN before each fill, so an element read but never copied shows), at every
    valid point of its sweep: the copies' transposition, the pipeline's stages and the epilogue's
    passes depend on the tile shape, the step and the depth."""
    from conftest import padded_output
    from kernelkit.checks import check_case
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
    from kernelkit.checks import check_case
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
    from kernelkit.checks import check_case
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
