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
    """This folder's spec: tiled's controls depend on its k tile (bk)."""
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


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    a, b = inputs["a"], inputs["b"]
    k = a.shape[1]
    if layout == "tiled":
        return emulate_tiled(a, b, control)
    if control == "k_tail" and layout == "tile16":
        full = k // 16 * 16
        return a[:, :full] @ b[:full], None
    if control == "overwrite" and layout == "reg4x4":  # only the last step of the last tile remains
        last = (k - 1) // 32 * 32 + 31
        return (np.outer(a[:, last], b[last]) if last < k else np.zeros((a.shape[0], b.shape[1]))), None
    return a @ b, None
