"""The neighbour sum's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np



def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = x.copy() if control == "self" else np.zeros_like(x)
    for node in range(len(indptr) - 1):
        end = indptr[node + 1] - (1 if control == "last_edge" else 0)
        for e in range(indptr[node], end):
            out[node] += x[indices[e]]
    return out, None
