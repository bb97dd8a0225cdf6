"""RMSNorm's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np



def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    x32, w32 = inputs["x"].astype(np.float32), inputs["weight"].astype(np.float32)
    eps = np.float32(0 if control == "epsilon" else 1e-5)
    mean_square = (x32 * x32).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(x32.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = x32 * w32 * (np.float32(1) / np.sqrt(mean_square + eps))
    unwritten = None
    if control == "tail":  # the final column of every row is never written
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten[:, -1] = True
    return y, unwritten
