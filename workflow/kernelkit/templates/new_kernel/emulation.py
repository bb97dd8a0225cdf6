"""NEWKERNEL's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    x = inputs["x"].astype(np.float32)
    y = x.copy() if control == "scale" else inputs["scale"][0] * x
    unwritten = None
    if control == "tail":
        unwritten = np.zeros(y.shape, dtype=bool)
        unwritten[-1] = True
    return y, unwritten
