"""The matrix product's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np



def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    a, b = inputs["a"], inputs["b"]
    k = a.shape[1]
    if control == "k_tail" and layout == "tile16":
        full = k // 16 * 16
        return a[:, :full] @ b[:full], None
    if control == "overwrite" and layout == "reg4x4":  # only the last step of the last tile remains
        last = (k - 1) // 32 * 32 + 31
        return (np.outer(a[:, last], b[last]) if last < k else np.zeros((a.shape[0], b.shape[1]))), None
    return a @ b, None
