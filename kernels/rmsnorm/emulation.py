"""RMSNorm's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from functools import cache
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


def vec_row_parts(row: int, cols: int, threads: int, vec: int, vector: bool = True,
                  past_registers: bool = False) -> dict[int, tuple[int, str]]:
    """rmsnorm_vec's split of one row, from its index formulas: {column: (thread, part)} for every
    column some thread holds, part 'head', 'quad' or 'tail' (x's base is 16-byte aligned).
    layernorm_vec splits its rows the same way and uses this too, with `past_registers`: its
    scalar path also holds the (at most 3) columns past 4 * vec * threads, one each for the first
    threads, so its launch may give a row 3 columns more than its register slots."""
    address = 4 * row * cols
    head = min(cols, (16 - address % 16) % 16 // 4) if vector else 0
    quads = (cols - head) // 4 if vector else 0
    tail = cols - head - 4 * quads
    held: dict[int, tuple[int, str]] = {}

    def hold(column: int, thread: int, part: str) -> None:
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
        if not vector and past_registers and 4 * vec * threads + tid < cols:
            hold(4 * vec * threads + tid, tid, "tail")
    return held


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    x, w = inputs["x"], inputs["weight"]
    rows, cols = x.shape
    kept = np.ones(x.shape, dtype=bool)
    unwritten = np.zeros(x.shape, dtype=bool)
    if layout == "vec":
        spec = own_spec()
        threads = spec.launch(spec.layout("vec"), (rows, cols)).block[0]
        for row in range(rows):
            for column, (thread, part) in vec_row_parts(row, cols, threads, spec.layout("vec")["vec"]).items():
                if control == "vec_tail" and part == "tail":
                    kept[row, column] = False
                    unwritten[row, column] = True
                kept[row, column] &= not (control == "vec_head" and part == "head")
                kept[row, column] &= not (control == "vec_warps" and thread >= 32)
    elif control == "tail":  # the final column of every row is never written
        unwritten[:, -1] = True
    eps = np.float32(0 if layout != "vec" and control == "epsilon" else 1e-5)
    mean_square = np.where(kept, x * x, 0).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(cols)
    with np.errstate(divide="ignore", invalid="ignore"):
        return x * w * (np.float32(1) / np.sqrt(mean_square + eps)), unwritten
