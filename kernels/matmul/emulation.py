"""The matrix product's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

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
    """This folder's spec: the controls of tiled and simt depend on their tile sizes."""
    return specs.load(FOLDER.name, FOLDER.parent)


def emulate_tiled(a: np.ndarray, b: np.ndarray, control: str | None):
    k = a.shape[1]
    bk = own_spec().layout("tiled")["bk"]
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


def simt_source_rows(m: int, bm: int, wm: int) -> np.ndarray:
    """Under the `simt_fragment` control, the A row each output row of C is computed from: a thread's
    rows are warp_m wm + 16 s + 4 lane_m + i (sub-tile s), and every sub-tile reads sub-tile 0's."""
    rows = np.arange(m)
    local = rows % bm
    return rows - local + local // wm * wm + local % 16


def emulate_simt(a: np.ndarray, b: np.ndarray, control: str | None):
    (m, k), n = a.shape, b.shape[1]
    layout = own_spec().layout("simt")
    if control == "simt_k_tail":
        full = k // layout["bk"] * layout["bk"]
        return a[:, :full] @ b[:full], None
    if control == "simt_fragment":  # the source row never passes the output row, so it lies inside A
        return a[simt_source_rows(m, layout["bm"], layout["wm"])] @ b, None
    if control == "simt_last_column":
        unwritten = np.zeros((m, n), dtype=bool)
        unwritten[:, -1] = n % 4 != 0  # only the scalar path (N not a multiple of 4) has the bug
        return a @ b, unwritten
    return a @ b, None


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    a, b = inputs["a"], inputs["b"]
    k = a.shape[1]
    if layout == "tiled":
        return emulate_tiled(a, b, control)
    if layout == "simt":
        return emulate_simt(a, b, control)
    if control == "k_tail" and layout == "tile16":
        full = k // 16 * 16
        return a[:, :full] @ b[:full], None
    if control == "overwrite" and layout == "reg4x4":  # only the last step of the last tile remains
        last = (k - 1) // 32 * 32 + 31
        return (np.outer(a[:, last], b[last]) if last < k else np.zeros((a.shape[0], b.shape[1]))), None
    return a @ b, None
