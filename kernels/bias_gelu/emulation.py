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
    """vec4 as launched (bias_gelu.vec4_grid): in the quad path each block row of the grid owns
    a run of ceil(rows / grid y) consecutive rows, walked four in flight, then a remainder loop; the flat path walks quads with a wrapping bias
    index, then a scalar tail. Allocations are 16-byte aligned, so cols % 4 picks the path."""
    spec = own_spec()
    x, bias = inputs["x"], inputs["bias"]
    rows, cols = x.shape
    unwritten = np.zeros(x.shape, dtype=bool)
    if cols % 4 == 0:
        _, runs = spec.launch(spec.layout("vec4"), (rows, cols)).grid
        b = np.tile(bias[:4], cols // 4) if control == "vec_row_bias" else bias
        chunk = -(-rows // runs)
        for first in range(0, rows, chunk):
            count = min(rows - first, chunk)
            if control == "vec_rows" and count % 4:
                unwritten[first + count - 1] = True
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


def emulate_flat(inputs: Mapping[str, np.ndarray], control: str | None):
    """flat as launched: when cols is a multiple of 4 (allocations are 16-byte aligned), quad
    first + k * threads of block b (first = b * quads * threads + t) takes bias quad
    first mod cols/4 stepped k times by threads mod cols/4, wrapping (or, under the control,
    restarting at 0); otherwise an element-wise loop over the grid."""
    spec = own_spec()
    layout = spec.layout("flat")
    x, bias = inputs["x"], inputs["bias"]
    rows, cols = x.shape
    flat = x.reshape(-1)
    total = flat.size
    unwritten = np.zeros(total, dtype=bool)
    if cols % 4 or total < 4:
        if control == "flat_tail":
            unwritten[-1] = True
        return gelu_sigmoid32(flat + bias[np.arange(total) % cols]).reshape(x.shape), unwritten.reshape(x.shape)
    threads, per_thread = int(layout["threads"]), int(layout["quads"])
    blocks = spec.launch(layout, (rows, cols)).grid[0]
    col_quads, quads = cols // 4, total // 4
    bias_quad = np.full(quads, -1, dtype=np.int64)
    for first in range(blocks * per_thread * threads):
        if first % (per_thread * threads) >= threads:
            continue
        c = first % col_quads
        for k in range(per_thread):
            q = first + k * threads
            if q < quads:
                assert bias_quad[q] == -1
                bias_quad[q] = c
            c += threads % col_quads
            if c >= col_quads:
                c = 0 if control == "flat_wrap" else c - col_quads
    assert (bias_quad >= 0).all()
    column = (4 * bias_quad[:, None] + np.arange(4)).reshape(-1)
    return gelu_sigmoid32(flat + bias[column]).reshape(x.shape), unwritten.reshape(x.shape)


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "vec4":
        return emulate_vec4(inputs, control)
    if layout == "flat":
        return emulate_flat(inputs, control)
    z = inputs["x"] if control == "bias" else inputs["x"] + inputs["bias"]
    y = gelu32(z)
    unwritten = None
    if control == "tail":
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten.reshape(-1)[-1] = True
    return y, unwritten
