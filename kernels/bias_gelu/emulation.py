"""Bias + GELU's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np



def gelu32(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float32)
    return np.float32(0.5) * z * (np.float32(1) + np.tanh(np.float32(0.7978845608028654) * (z + np.float32(0.044715) * z * z * z)))


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    z = inputs["x"] if control == "bias" else inputs["x"] + inputs["bias"]
    y = gelu32(z)
    unwritten = None
    if control == "tail":
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten.reshape(-1)[-1] = True
    return y, unwritten
