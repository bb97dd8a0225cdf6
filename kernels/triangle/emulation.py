"""The triangle product's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    if layout == "tiled":
        return emulate_tiled(inputs, TILED, control)
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


TILED = {"tile": "64x64", "pipeline": "4x2"}  # the spec's default point of `tiled`: ti x tj, bk x stages


def tiled_geometry(ti: int, tj: int, bk: int, stages: int) -> dict[str, int]:
    """triangle_tiled's compile-time constants (the TRT_ macros), as the kernel derives them."""
    gi, gj = ti // 8, tj // 8
    threads = 8 * gi * gj
    smem = stages * bk * 8 * (ti + 4 + tj + 4)
    istr = tj + (16 if gj < 8 else 0)

    def cstride(pr: int) -> int:
        return pr * gi * istr + (4 - (pr * gi * istr) % 32 + 32) % 32

    pr = next(pr for pr in (8, 4, 2, 1) if 8 * cstride(pr) <= smem)
    return {"gi": gi, "gj": gj, "threads": threads, "smem": smem, "istr": istr, "pr": pr, "cstr": cstride(pr)}


def _copy(tile, x, rows, row0, c0, k0, tid, threads, bk):
    """TrtLoader<ROWS>::copy: element f = tid + THREADS m is (channel f % 8, row (f / 8) % ROWS, k f / (8 ROWS))."""
    n, channels = x.shape[0], x.shape[2]
    plane = 8 * rows
    slots, kstep = (plane // threads, 1) if plane >= threads else (1, threads // plane)
    kk0 = 0 if plane >= threads else tid // plane
    for m in range(bk * plane // threads):
        s = m % slots
        p = (tid + s * threads) % plane
        c, row = p & 7, p >> 3
        kk = kk0 + (m // slots) * kstep
        k = np.broadcast_to(k0 + kk, tid.shape)
        valid = (row0 + row < n) & (c0 + c < channels) & (k < n)
        values = np.zeros(len(tid), dtype=np.float32)
        values[valid] = x[(row0 + row)[valid], k[valid], (c0 + c)[valid]]
        tile[kk * 8 * (rows + 4) + c * (rows + 4) + row] = values


def emulate_tiled(inputs: Mapping[str, np.ndarray], params: Mapping[str, int] = TILED, control: str | None = None):
    """triangle_tiled block by block with its own index formulas (shared memory as a flat array,
    filled with NaN before each fill so that a read of an element no copy wrote shows up), so the
    CPU tests exercise the copies' transposition, the thread tiles and the epilogue's staging."""
    a, b = inputs["a"], inputs["b"]
    n, channels = a.shape[0], a.shape[2]
    ti, tj = (int(v) for v in str(params["tile"]).split("x"))
    bk, stages = (int(v) for v in str(params["pipeline"]).split("x"))
    g = tiled_geometry(ti, tj, bk, stages)
    threads, gi, gj = g["threads"], g["gi"], g["gj"]
    tid = np.arange(threads)
    ch, t = tid // (gi * gj), tid % (gi * gj)
    row_i, col_j = t // gj, t % gj
    stage_floats = bk * 8 * (ti + 4 + tj + 4)
    out = np.zeros((n, n, channels), dtype=np.float32)
    unwritten = np.ones(out.shape, dtype=bool)
    k_tiles = n // bk if control == "tiled_k_tail" else -(-n // bk)
    half = 0 if control == "tiled_half" else tj // 2
    for c0 in range(0, channels, 8):
        for i0 in range(0, n, ti):
            for j0 in range(0, n, tj):
                smem = np.full(stages * stage_floats, np.nan, dtype=np.float32)
                acc = np.zeros((threads, 8, 8), dtype=np.float32)
                for kt in range(k_tiles):
                    base = (kt % stages) * stage_floats
                    a_tile = smem[base:base + bk * 8 * (ti + 4)]
                    b_tile = smem[base + bk * 8 * (ti + 4):base + stage_floats]
                    a_tile[:], b_tile[:] = np.nan, np.nan
                    _copy(a_tile, a, ti, i0, c0, kt * bk, tid, threads, bk)
                    _copy(b_tile, b, tj, j0, c0, kt * bk, tid, threads, bk)
                    for kk in range(bk):
                        a_row = kk * 8 * (ti + 4) + ch * (ti + 4) + 4 * row_i
                        b_row = kk * 8 * (tj + 4) + ch * (tj + 4) + 4 * col_j
                        av = np.concatenate([a_tile[a_row[:, None] + np.arange(4)],
                                             a_tile[a_row[:, None] + ti // 2 + np.arange(4)]], axis=1)
                        bv = np.concatenate([b_tile[b_row[:, None] + np.arange(4)],
                                             b_tile[b_row[:, None] + half + np.arange(4)]], axis=1)
                        acc += av[:, :, None] * bv[:, None, :]
                pr, cstr, istr = g["pr"], g["cstr"], g["istr"]
                for p in range(8 // pr):
                    smem[:] = np.nan
                    for rr in range(pr):
                        row = ch * cstr + (rr * gi + row_i) * istr + 4 * col_j
                        smem[row[:, None] + np.arange(4)] = acc[:, p * pr + rr, :4]
                        smem[row[:, None] + tj // 2 + np.arange(4)] = acc[:, p * pr + rr, 4:]
                    for m in range(8 * pr):
                        e = tid + m * threads
                        c, j, il = e & 7, (e >> 3) % tj, e // (8 * tj)
                        r = p * pr + il // gi
                        i = i0 + (r >> 2) * (ti // 2) + 4 * (il % gi) + (r & 3)
                        keep = (i < n) & (j0 + j < n) & (c0 + c < channels)
                        out[i[keep], (j0 + j)[keep], (c0 + c)[keep]] = smem[(c * cstr + il * istr + j)[keep]]
                        unwritten[i[keep], (j0 + j)[keep], (c0 + c)[keep]] = False
    return out, unwritten
