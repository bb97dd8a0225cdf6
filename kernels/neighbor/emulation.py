"""The neighbour sum's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def emulate_warp_vec(inputs: Mapping[str, np.ndarray], control: str | None):
    """neighbor_warp_vec's edge walk: batches of 32 edges, groups of four summed pairwise, then singles."""
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = np.zeros_like(x)
    for node in range(len(indptr) - 1):
        begin, end = int(indptr[node]), int(indptr[node + 1])
        for e0 in range(begin, end, 32):
            count = min(32, end - e0) - (1 if control == "warp_batch_end" else 0)
            j = 0
            while j + 4 <= count:
                a, b, c, d = (x[indices[e0 + j + i]] for i in range(4))
                out[node] += (a + b) + (c if control == "warp_unrolled" else c + d)
                j += 4
            for j in range(j, count):
                out[node] += x[indices[e0 + j]]
    return out, None


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "warp_vec":
        return emulate_warp_vec(inputs, control)
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = x.copy() if control == "self" else np.zeros_like(x)
    for node in range(len(indptr) - 1):
        end = indptr[node + 1] - (1 if control == "last_edge" else 0)
        for e in range(indptr[node], end):
            out[node] += x[indices[e]]
    return out, None
