"""LayerNorm's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from functools import cache, partial
from pathlib import Path
from typing import Mapping

import numpy as np

from kernelkit import spec as specs
from kernelkit.spec import KernelSpec

FOLDER = Path(__file__).resolve().parent


@cache
def own_spec() -> KernelSpec:
    """This folder's spec: vec's row split follows its launch (threads per row) and `vec`."""
    return specs.load(FOLDER.name, FOLDER.parent)


@cache
def vec_row_parts():
    """rmsnorm's row split (layernorm_vec uses rmsnorm_vec's index formulas), from its emulation,
    with layernorm_vec's scalar columns past the register slots."""
    rmsnorm = specs.load("rmsnorm", FOLDER.parent)
    return partial(specs.load_emulation(rmsnorm).__globals__["vec_row_parts"], past_registers=True)


def emulate_vec(inputs: Mapping[str, np.ndarray], control: str | None):
    """layernorm_vec with its row split and its controls."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    rows, cols = x.shape
    spec = own_spec()
    threads, vec = spec.launch(spec.layout("vec"), (rows, cols)).block[0], spec.layout("vec")["vec"]
    y = np.empty_like(x)
    unwritten = np.zeros(x.shape, dtype=bool)
    n = np.float32(cols)
    for row in range(rows):
        parts = vec_row_parts()(row, cols, threads, vec)
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


def row_head(row: int, cols: int) -> int:
    """Columns before the row's first 16-byte boundary (a 16-byte-aligned array)."""
    return min(cols, (16 - 4 * row * cols % 16) % 16 // 4)


def register_slots(head: int, cols: int) -> np.ndarray:
    """The register slot of each column on the vector path at this head: the head scalar (its
    thread), quad q element j (3 + 4q + j) or the tail scalar (its thread, offset past the quads)."""
    column = np.arange(cols)
    quads = (cols - head) // 4
    tail = (1 << 24) + column - head - 4 * quads
    return np.where(column < head, column, np.where(column < head + 4 * quads, 3 + column - head, tail))


def reloaded_row(x: np.ndarray, row: int, source: int) -> np.ndarray:
    """The values pipe's mutated prefetch leaves for `row`: the registers filled from row `source`
    (at its head; slots it does not fill are zero) read at `row`'s head."""
    cols = x.shape[1]
    filled = dict(zip(register_slots(row_head(source, cols), cols).tolist(), x[source].tolist()))
    return np.array([filled.get(slot, 0.0) for slot in register_slots(row_head(row, cols), cols).tolist()],
                    dtype=np.float32)


def emulate_stream(inputs: Mapping[str, np.ndarray], control: str | None, name: str = "stream"):
    """layernorm_stream (and layernorm_pipe, its rows pipelined: the same arithmetic): vec's row
    split (threads fixed, capacity / (4 * threads) quads each), the grid's row loop, the
    weight/bias planes read at the row's head shift, the moments merged per thread (the control
    without the between-group term leaves each thread's own sum of squares)."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    rows, cols = x.shape
    spec = own_spec()
    layout = spec.layout(name)
    threads = int(layout["threads"])
    vec = int(layout["capacity"]) // (4 * threads)
    grid = spec.launch(layout, (rows, cols)).grid[0]
    y = np.empty_like(x)
    unwritten = np.ones(x.shape, dtype=bool)
    step = grid + 1 if control == "stream_rows" and name == "stream" else grid
    walked = sorted({row for first in range(grid) for row in range(first, rows, step)})
    n = np.float32(cols)
    for row in walked:
        parts = vec_row_parts()(row, cols, threads, vec)
        assert sorted(parts) == list(range(cols)), (row, cols)
        held = x[row]
        if control == "pipe_prefetch" and name == "pipe" and row >= grid:  # a block's later rows
            held = reloaded_row(x, row, row - grid)
        mean = held.sum(dtype=np.float32) / n
        centred = held - mean
        squares = centred.dot(centred)
        if control == "stream_delta":
            squares = np.float32(0)
            for thread in range(threads):
                mine = x[row, [column for column, (owner, _) in parts.items() if owner == thread]]
                if mine.size:
                    local = mine - mine.sum(dtype=np.float32) / np.float32(mine.size)
                    squares += local.dot(local)
        source = np.arange(cols)
        head = row_head(row, cols)
        if control == "stream_phase" and name == "stream":
            source = np.array([c - head if parts[c][1] == "quad" else c for c in range(cols)])
        y[row] = centred * (np.float32(1) / np.sqrt(squares / n + np.float32(1e-5))) * w[source] + b[source]
        unwritten[row] = False
    return y, unwritten


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "vec":
        return emulate_vec(inputs, control)
    if layout in ("stream", "pipe"):
        return emulate_stream(inputs, control, layout)
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
