"""Every kernel folder, on the CPU: its mutations, its sm_90 build, its reference and tolerance.

The tolerance of each operation is exercised with a float32 NumPy emulation of its kernel:
the emulation must pass every correctness case and each emulated negative control must fail,
which shows the tolerance is neither too tight for FP32 nor loose enough to hide the bugs.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from conftest import padded_output

from kernelkit import spec as specs
from kernelkit.correctness import check_case
from kernelkit.inputs import rng_for
from kernelkit.spec import shape_name

KERNELS = specs.available()
NVCC = shutil.which("nvcc")


def test_the_seed_operations_are_present():
    assert {"rmsnorm", "matmul", "layernorm", "bias_gelu", "triangle", "neighbor"} <= set(KERNELS)


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_mutation_applies_once_and_changes_the_source(kernel):
    spec = specs.load(kernel)
    assert len(spec.mutations) >= 2
    for control in spec.mutations:
        assert spec.source_text(control) != spec.source_text()
        assert spec.source_sha256(control) != spec.source_sha256()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on the PATH, so the sm_90 compile check cannot run")
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_and_mutations_compile_for_sm90(tmp_path, kernel):
    spec = specs.load(kernel)
    # Every mutation with the spec's options, and the source with each layout's own options.
    builds = [(control, spec.compile_options) for control in [None, *spec.mutations]]
    builds += [(None, options) for options in {spec.compile_options_of(layout) for layout in spec.layouts}]
    for number, (control, options) in enumerate(builds):
        source = tmp_path / f"{number}.cu"
        source.write_text(spec.source_text(control))
        done = subprocess.run(
            [NVCC, "-arch=sm_90", "-cubin", *options, "-o", str(tmp_path / f"{number}.cubin"), str(source)],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, (control, options, done.stderr)


def case(spec, shape, pattern):
    inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
    scale = spec.error_scale(inputs) if spec.error_scale else None
    return inputs, spec.reference(inputs), scale


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_all_zero_output_fails_the_normal_cases(kernel):
    spec = specs.load(kernel)
    for shape in spec.correctness_shapes:
        inputs, ref, scale = case(spec, shape, "normal")
        verdict = check_case(padded_output(np.zeros_like(ref)), ref, spec.tolerance, scale=scale)
        assert not verdict["passed"], (shape, verdict)


# float32 emulations of the kernels and of their negative controls -------------------------

def gelu32(z):
    z = z.astype(np.float32)
    return np.float32(0.5) * z * (np.float32(1) + np.tanh(np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)))


def bias_gelu32(inputs, layout, control=None):
    if layout == "vec4":
        return bias_gelu_vec4_32(inputs, control)
    z = inputs["x"] if control == "bias" else inputs["x"] + inputs["bias"]
    y = gelu32(z)
    unwritten = None
    if control == "tail":
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten.reshape(-1)[-1] = True
    return y, unwritten


def gelu_sigmoid32(z):
    """vec4's form: z / (1 + exp(-2u)), in float32."""
    z = z.astype(np.float32)
    u = np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)
    with np.errstate(over="ignore"):
        return z / (np.float32(1) + np.exp(np.float32(-2) * u))


def bias_gelu_vec4_32(inputs, control):
    """vec4 as launched (bias_gelu.vec4_grid): the quad path walks rows in steps of grid y,
    four in flight, then a remainder loop; the flat path walks quads with a wrapping bias
    index, then a scalar tail. Allocations are 16-byte aligned, so cols % 4 picks the path."""
    from kernelkit import spec as specs_module

    spec = specs_module.load("bias_gelu")
    x, bias = inputs["x"], inputs["bias"]
    rows, cols = x.shape
    unwritten = np.zeros(x.shape, dtype=bool)
    if cols % 4 == 0:
        _, step = spec.launch(spec.layout("vec4"), (rows, cols)).grid
        b = np.tile(bias[:4], cols // 4) if control == "vec_row_bias" else bias
        for start in range(min(step, rows)):
            lane_rows = list(range(start, rows, step))
            unrolled = len(lane_rows) // 4 * 4
            if control == "vec_rows" and len(lane_rows) > unrolled and lane_rows[-1] == rows - 1:
                unwritten[rows - 1] = True
        return gelu_sigmoid32(x + b), unwritten
    flat = x.reshape(-1)
    total = flat.size
    quads = total // 4
    bias_index = np.empty(total, dtype=np.int64)
    for q in range(quads):
        c = 4 * q % cols
        for k in range(4):
            bias_index[4 * q + k] = c
            c = (c if control == "vec_bias_wrap" else 0) if c + 1 == cols else c + 1
    bias_index[4 * quads:] = np.arange(4 * quads, total) % cols
    if control == "vec_tail" and total > 4 * quads:
        unwritten.reshape(-1)[-1] = True
    return gelu_sigmoid32(flat + bias[bias_index]).reshape(x.shape), unwritten


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


def triangle32(inputs, layout, control=None):
    a, b = inputs["a"], inputs["b"]
    if layout == "batched":
        if control == "batched_k_tail":
            kept = a.shape[1] // 8 * 8
            a, b = a[:, :kept], b[:, :kept]
        if control == "batched_channel":
            b = b.copy()
            b[:, :, 1::4] = b[:, :, 0::4][:, :, : b[:, :, 1::4].shape[2]]
        control = None
    if control == "last_k":
        a, b = a[:, :-1], b[:, :-1]
    if control == "transpose":
        b = b.transpose(1, 0, 2)
    out = np.zeros((a.shape[0], b.shape[0], a.shape[2]), dtype=np.float32)
    for k in range(a.shape[1]):  # sequential FP32 accumulation, as the kernel does
        out += a[:, None, k, :] * b[None, :, k, :]
    return out, None


def neighbor_warp_vec32(inputs, control):
    """neighbor_warp_vec's edge walk: batches of 32 edges, groups of four summed pairwise, then singles."""
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = np.zeros_like(x)
    for node in range(len(indptr) - 1):
        begin, end = int(indptr[node]), int(indptr[node + 1])
        for e0 in range(begin, end, 32):
            count = min(32, end - e0) - (1 if control == "warp_batch_end" else 0)
            j = 0
            while j + 4 <= count:
                a, b, c, d = (x[indices[e0 + j + i]] for i in range(4))
                out[node] += (a + b) + (c if control == "warp_unrolled" else c + d)
                j += 4
            for j in range(j, count):
                out[node] += x[indices[e0 + j]]
    return out, None


def neighbor32(inputs, layout, control=None):
    if layout == "warp_vec":
        return neighbor_warp_vec32(inputs, control)
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = x.copy() if control == "self" else np.zeros_like(x)
    for node in range(len(indptr) - 1):
        end = indptr[node + 1] - (1 if control == "last_edge" else 0)
        for e in range(indptr[node], end):
            out[node] += x[indices[e]]
    return out, None


def layernorm_vec32(inputs, control):
    """layernorm_vec with its row split (the same index formulas as rmsnorm_vec) and its controls."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    rows, cols = x.shape
    spec = specs.load("layernorm")
    threads, vec = spec.launch(spec.layout("vec"), (rows, cols)).block[0], spec.layout("vec")["vec"]
    y = np.empty_like(x)
    unwritten = np.zeros(x.shape, dtype=bool)
    n = np.float32(cols)
    for row in range(rows):
        parts = rmsnorm_vec_parts(row, cols, threads, vec)
        kept = np.ones(cols, dtype=bool)
        for column, (thread, part) in parts.items():
            if control == "vec_tail" and part == "tail":
                kept[column] = False
                unwritten[row, column] = True
            kept[column] &= not (control == "vec_warps" and thread >= 32)
        mean = np.where(kept, x[row], 0).sum(dtype=np.float32) / n
        centred = x[row] - mean
        squares = np.where(kept, centred * centred, 0).sum(dtype=np.float32)
        if control == "vec_empty_slots":
            quads = sum(part == "quad" for _, part in parts.values()) // 4
            squares += np.float32(4 * (vec * threads - quads)) * mean * mean
        y[row] = centred * (np.float32(1) / np.sqrt(squares / n + np.float32(1e-5))) * w + (0 if control == "bias" else b)
    return y, unwritten


def layernorm32(inputs, layout, control=None):
    if layout == "vec":
        return layernorm_vec32(inputs, control)
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    cols = x.shape[1]
    column = np.arange(cols)
    kept = np.ones(cols, dtype=bool)
    if control == "tree_width" and layout == "block":  # only threads 0..127 of 256 are summed
        kept = column % 256 < 128
    if control == "shuffle_width" and layout == "warp":  # only lanes 0..15 are summed
        kept = (column // 4 if cols % 4 == 0 else column) % 32 < 16
    n = np.float32(cols)
    mean = np.where(kept, x, 0).sum(axis=1, dtype=np.float32, keepdims=True) / n
    centred = x - mean
    var = np.where(kept, centred * centred, 0).sum(axis=1, dtype=np.float32, keepdims=True) / n
    rstd = np.float32(1) / np.sqrt(var + np.float32(1e-5))
    return centred * rstd * w + (0 if control == "bias" else b), None


TILED_POINTS = [
    {},  # the spec's default point
    {"bm": 64, "bn": 128, "bk": 16, "wm": 32, "wn": 64, "tm": 4, "tn": 8, "wniter": 2, "stages": 2},
    {"bm": 128, "bn": 64, "bk": 16, "wm": 64, "wn": 32, "tm": 8, "tn": 4, "wniter": 1, "stages": 2},
    {"bm": 64, "bn": 64, "bk": 8, "wm": 32, "wn": 32, "tm": 4, "tn": 4, "wniter": 1, "stages": 4},
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
    from kernelkit import KitError

    spec = specs.load("matmul")
    with pytest.raises(KitError, match="not a valid point: .*multiples of 4"):
        spec.launch({**spec.layout("tiled"), "tm": 6}, (64, 64, 64))


def matmul32(inputs, layout, control=None):
    a, b = inputs["a"], inputs["b"]
    k = a.shape[1]
    if layout == "tiled":
        bk = specs.load("matmul").layout("tiled")["bk"]
        if control == "tiled_k_tail":
            full = k // bk * bk
            return a[:, :full] @ b[:full], None
        if control == "tiled_overwrite":  # only the last step of the last tile remains
            last = (k - 1) // bk * bk + bk - 1
            return (np.outer(a[:, last], b[last]) if last < k else np.zeros((a.shape[0], b.shape[1]))), None
        if control == "tiled_last_row":
            unwritten = np.zeros((a.shape[0], b.shape[1]), dtype=bool)
            unwritten[-1] = True
            return a @ b, unwritten
        return a @ b, None
    if control == "k_tail" and layout == "tile16":
        full = k // 16 * 16
        return a[:, :full] @ b[:full], None
    if control == "overwrite" and layout == "reg4x4":  # only the last step of the last tile remains
        last = (k - 1) // 32 * 32 + 31
        return (np.outer(a[:, last], b[last]) if last < k else np.zeros((a.shape[0], b.shape[1]))), None
    return a @ b, None


def rmsnorm_vec_parts(row: int, cols: int, threads: int, vec: int, vector: bool = True):
    """rmsnorm_vec's split of one row, from its index formulas: {column: (thread, part)} for every
    column some thread holds, part 'head', 'quad' or 'tail' (x's base is 16-byte aligned)."""
    address = 4 * row * cols
    head = min(cols, (16 - address % 16) % 16 // 4) if vector else 0
    quads = (cols - head) // 4 if vector else 0
    tail = cols - head - 4 * quads
    held = {}

    def hold(column, thread, part):
        assert column not in held, (column, held[column], thread, part)
        held[column] = (thread, part)

    for tid in range(threads):
        if tid < head:
            hold(tid, tid, "head")
        for k in range(vec):
            if vector:
                q = tid + k * threads
                if q < quads:
                    for j in range(4):
                        hold(head + 4 * q + j, tid, "quad")
            else:
                for j in range(4):
                    c = 4 * k * threads + tid + j * threads
                    if c < tail:
                        hold(c, tid, "tail")
        if vector and tid < tail:
            hold(head + 4 * quads + tid, tid, "tail")
    return held


def test_rmsnorm_vec_holds_every_column_once_on_both_paths():
    spec = specs.load("rmsnorm")
    for cols in (1, 3, 4, 5, 31, 33, 127, 128, 4096, 4097, 8193, 16384):
        threads = spec.launch(spec.layout("vec"), (8, cols)).block[0]
        for row in range(4):
            for vector in (True, False):
                assert sorted(rmsnorm_vec_parts(row, cols, threads, 8, vector)) == list(range(cols)), (cols, row, vector)


def rmsnorm32(inputs, layout, control=None):
    x, w = inputs["x"], inputs["weight"]
    rows, cols = x.shape
    kept = np.ones(x.shape, dtype=bool)
    unwritten = np.zeros(x.shape, dtype=bool)
    if layout == "vec":
        spec = specs.load("rmsnorm")
        threads = spec.launch(spec.layout("vec"), (rows, cols)).block[0]
        for row in range(rows):
            for column, (thread, part) in rmsnorm_vec_parts(row, cols, threads, spec.layout("vec")["vec"]).items():
                if control == "vec_tail" and part == "tail":
                    kept[row, column] = False
                    unwritten[row, column] = True
                kept[row, column] &= not (control == "vec_head" and part == "head")
                kept[row, column] &= not (control == "vec_warps" and thread >= 32)
    elif control == "tail":
        unwritten[:, -1] = True
    eps = np.float32(0 if layout != "vec" and control == "epsilon" else 1e-5)
    mean_square = np.where(kept, x * x, 0).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(cols)
    with np.errstate(divide="ignore", invalid="ignore"):
        return x * w * (np.float32(1) / np.sqrt(mean_square + eps)), unwritten


EMULATIONS = {"rmsnorm": rmsnorm32, "bias_gelu": bias_gelu32, "triangle": triangle32, "neighbor": neighbor32, "layernorm": layernorm32,
              "matmul": matmul32}


def test_every_kernel_folder_has_an_emulation():
    assert set(EMULATIONS) == set(KERNELS)


@pytest.mark.parametrize("kernel", sorted(EMULATIONS))
def test_float32_emulation_passes_and_every_emulated_control_is_caught(kernel):
    spec, emulate = specs.load(kernel), EMULATIONS[kernel]
    caught = {control: 0 for control in spec.mutations}
    for shape in spec.correctness_shapes:
        for pattern in spec.patterns:
            inputs, ref, scale = case(spec, shape, pattern)
            for layout in spec.layouts:
                verdict = check_case(padded_output(*emulate(inputs, layout)), ref, spec.tolerance, scale=scale)
                assert verdict["passed"], (shape, pattern, layout, verdict)
                for control in spec.mutations:
                    mutated = padded_output(*emulate(inputs, layout, control))
                    caught[control] += not check_case(mutated, ref, spec.tolerance, scale=scale)["passed"]
    assert all(count > 0 for count in caught.values()), caught


def test_references_match_hand_computation():
    matmul = specs.load("matmul")
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert matmul.reference({"a": a, "b": a}).tolist() == [[7.0, 10.0], [15.0, 22.0]]

    layernorm = specs.load("layernorm")
    ones = np.ones(4, dtype=np.float32)
    # Row [1, 2, 3, 4]: mean 2.5, variance 1.25, so y = (x - 2.5) / sqrt(1.25 + 1e-5).
    y = layernorm.reference({"x": np.array([[1, 2, 3, 4]], dtype=np.float32), "weight": ones, "bias": 0 * ones})
    np.testing.assert_allclose(y[0], (np.arange(1, 5) - 2.5) / np.sqrt(1.25 + 1e-5), rtol=1e-15)

    triangle = specs.load("triangle")
    a = np.array([[[1.0], [2.0]], [[3.0], [4.0]]], dtype=np.float32)
    # out[i, j] = sum_k a[i, k] a[j, k]: [[1+4, 3+8], [3+8, 9+16]]
    assert triangle.reference({"a": a, "b": a})[:, :, 0].tolist() == [[5.0, 11.0], [11.0, 25.0]]

    neighbor = specs.load("neighbor")
    x = np.array([[1.0], [10.0], [100.0]], dtype=np.float32)
    inputs = {"x": x, "indptr": np.array([0, 2, 2, 3], dtype=np.int32), "indices": np.array([1, 2, 0], dtype=np.int32)}
    assert neighbor.reference(inputs)[:, 0].tolist() == [110.0, 0.0, 1.0]

    gelu = specs.load("bias_gelu")
    y = gelu.reference({"x": np.array([[0.0, 1.0]], dtype=np.float32), "bias": np.zeros(2, dtype=np.float32)})
    # GELU_tanh(1) = 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.8411919906
    assert y[0, 0] == 0.0 and y[0, 1] == pytest.approx(0.8411919906082768, abs=1e-12)


def test_neighbor_graph_is_fixed_by_the_node_count_and_has_isolated_nodes():
    neighbor = specs.load("neighbor")
    first = neighbor.make_inputs((100, 4), "normal", rng_for("a"))
    second = neighbor.make_inputs((100, 4), "zeros", rng_for("b"))
    np.testing.assert_array_equal(first["indptr"], second["indptr"])
    np.testing.assert_array_equal(first["indices"], second["indices"])
    degrees = np.diff(first["indptr"])
    assert (degrees == 0).any() and degrees.max() <= 32
    assert neighbor.bytes_moved((100, 4)) == 4 * (int(first["indptr"][-1]) * 5 + 101 + 400)


@pytest.mark.parametrize("kernel", KERNELS)
def test_bytes_and_flops_are_positive_and_grow_with_the_shape(kernel):
    spec = specs.load(kernel)
    small, large = (8,) * len(spec.dims), (64,) * len(spec.dims)
    assert 0 < spec.bytes_moved(small) < spec.bytes_moved(large)
    assert 0 < spec.flops(small) < spec.flops(large)
