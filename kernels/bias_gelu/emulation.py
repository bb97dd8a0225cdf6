"""Bias + GELU's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

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
    """This folder's spec: vec4's emulation follows its launch geometry."""
    return specs.load(FOLDER.name, FOLDER.parent)


def gelu32(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float32)
    return np.float32(0.5) * z * (np.float32(1) + np.tanh(np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)))


def gelu_sigmoid32(z: np.ndarray) -> np.ndarray:
    """vec4's form: z / (1 + exp(-2u)), in float32."""
    z = z.astype(np.float32)
    u = np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)
    with np.errstate(over="ignore"):
        return z / (np.float32(1) + np.exp(np.float32(-2) * u))


def emulate_vec4(inputs: Mapping[str, np.ndarray], control: str | None):
    """vec4 as launched (bias_gelu.vec4_grid): the quad path walks rows in steps of grid y,
    four in flight, then a remainder loop; the flat path walks quads with a wrapping bias
    index, then a scalar tail. Allocations are 16-byte aligned, so cols % 4 picks the path."""
    spec = own_spec()
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


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "vec4":
        return emulate_vec4(inputs, control)
    z = inputs["x"] if control == "bias" else inputs["x"] + inputs["bias"]
    y = gelu32(z)
    unwritten = None
    if control == "tail":
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten.reshape(-1)[-1] = True
    return y, unwritten
