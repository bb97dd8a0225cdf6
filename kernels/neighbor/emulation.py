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


def _tree(rows: list[np.ndarray]) -> np.ndarray:
    """neighbor_warp_hint's pairwise sum of one group: ((v0 + v1) + (v2 + v3)) + ..."""
    while len(rows) > 1:
        rows = [rows[2 * k] + rows[2 * k + 1] for k in range(len(rows) // 2)]
    return rows[0]


def emulate_warp_hint(inputs: Mapping[str, np.ndarray], control: str | None, unroll: int = 4):
    """neighbor_warp_hint's edge walk: batches of 32 edges, groups of `unroll` rows summed as a tree,
    the batch's last count % unroll rows as one more group padded with zeros (adding zero is exact)."""
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = np.zeros_like(x)
    zero = np.zeros(x.shape[1], dtype=x.dtype)
    for node in range(len(indptr) - 1):
        begin, end = int(indptr[node]), int(indptr[node + 1])
        for e0 in range(begin, end, 32):
            count = min(32, end - e0)
            for j in range(0, count, unroll):
                if j + unroll > count and control == "hint_remainder":
                    break
                out[node] += _tree([x[indices[e0 + j + k]] if j + k < count else zero for k in range(unroll)])
    unwritten = None
    if control == "hint_last_quad":  # the vector path's last quad when the width allows quads, else the last float
        unwritten = np.zeros(x.shape, dtype=bool)
        unwritten[:, -4 if x.shape[1] % 4 == 0 else -1:] = True
    return out, unwritten


def emulate_node_split(inputs: Mapping[str, np.ndarray], control: str | None, unroll: int = 4, lanes: int = 64):
    """neighbor_node_split: per feature the same walk as warp_hint (batches of 32 edges, groups of
    `unroll` rows as a tree, the last group zero-padded); what differs is who writes which vector:
    warp w of the node's lanes // 32 writes vectors [w * chunk, (w + 1) * chunk) of the row, vectors of
    128 // lanes floats when the width allows them, else single floats."""
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    warps = lanes // 32
    vec = 4 // warps if x.shape[1] % (4 // warps) == 0 else 1
    row_len = x.shape[1] // vec
    chunk = row_len // warps if control == "split_chunk" else -(-row_len // warps)
    out = np.zeros_like(x)
    zero = np.zeros(x.shape[1], dtype=x.dtype)
    for node in range(len(indptr) - 1):
        begin, end = int(indptr[node]), int(indptr[node + 1])
        for e0 in range(begin, end, 32):
            count = min(32, end - e0) - (1 if control == "split_batch_end" else 0)
            for g in range(0, count, unroll):
                out[node] += _tree([x[indices[e0 + g + k]] if g + k < count else zero for k in range(unroll)])
    written = np.zeros(x.shape[1], dtype=bool)
    for w in range(warps):
        written[w * chunk * vec:min(row_len, (w + 1) * chunk) * vec] = True
    return out, np.broadcast_to(~written, x.shape).copy() if not written.all() else None


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "node_split":
        return emulate_node_split(inputs, control)
    if layout == "warp_hint":
        return emulate_warp_hint(inputs, control)
    if layout == "warp_vec":
        return emulate_warp_vec(inputs, control)
    x, indptr, indices = inputs["x"], inputs["indptr"], inputs["indices"]
    out = x.copy() if control == "self" else np.zeros_like(x)
    for node in range(len(indptr) - 1):
        end = indptr[node + 1] - (1 if control == "last_edge" else 0)
        for e in range(indptr[node], end):
            out[node] += x[indices[e]]
    return out, None
