"""LayerNorm's float32 emulation and that of its negative controls; the contract is kernelkit.spec.load_emulation's."""

from __future__ import annotations

from typing import Mapping

import numpy as np



def emulate(inputs: Mapping[str, np.ndarray], layout: str, control: str | None = None):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    cols = x.shape[1]
    column = np.arange(cols)
    kept = np.ones(cols, dtype=bool)
    if control == "tree_width" and layout == "block":  # only threads 0..127 of 256 are summed
        kept = column % 256 < 128
    if control == "shuffle_width" and layout == "warp":  # only lanes 0..15 are summed
        kept = (column // 4 if cols % 4 == 0 else column) % 32 < 16
    n = np.float32(cols)
    mean = np.where(kept, x, 0).sum(axis=1, dtype=np.float32, keepdims=True) / n
    centred = x - mean
    var = np.where(kept, centred * centred, 0).sum(axis=1, dtype=np.float32, keepdims=True) / n
    rstd = np.float32(1) / np.sqrt(var + np.float32(1e-5))
    return centred * rstd * w + (0 if control == "bias" else b), None
