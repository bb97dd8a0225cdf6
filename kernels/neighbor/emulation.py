"""The neighbour sum's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def emulate_warp_vec(inputs: Mapping[str, np.ndarray], control: str | None):
    """neighbor_warp_vec's edge walk: batches of 32 edges, groups of eight summed as a pairwise
    tree, the rows past a batch's end read as zero."""
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = np.zeros_like(x)
    zero = np.zeros_like(x[:1][0]) if len(x) else None
    for node in range(len(indptr) - 1):
        begin, end = int(indptr[node]), int(indptr[node + 1])
        for e0 in range(begin, end, 32):
            count = min(32, end - e0) - (1 if control == "warp_batch_end" else 0)
            for j in range(0, count, 8):
                v = [x[indices[e0 + j + k]] if j + k < count else zero for k in range(8)]
                last = v[6] if control == "warp_unrolled" else v[6] + v[7]
                out[node] += ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + last)
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
