"""The triangle product's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
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
