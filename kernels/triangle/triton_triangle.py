"""The Triton baseline for the triangle contraction: a program per (i, block of 32 j, block of
32 channels), accumulating a[i, k, c] * b[j, k, c] over k in a 32 x 32 register tile."""

import torch
import triton
import triton.language as tl

BLOCK_J, BLOCK_C = 32, 32


@triton.jit
def triangle_kernel(a_ptr, b_ptr, out_ptr, n, channels, BLOCK_J: tl.constexpr, BLOCK_C: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    js = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    j_ok, c_ok = js < n, cs < channels
    acc = tl.zeros((BLOCK_J, BLOCK_C), dtype=tl.float32)
    for k in range(0, n):
        a = tl.load(a_ptr + (i * n + k) * channels + cs, mask=c_ok, other=0.0)
        b = tl.load(b_ptr + (js[:, None].to(tl.int64) * n + k) * channels + cs[None, :],
                    mask=j_ok[:, None] & c_ok[None, :], other=0.0)
        acc += a[None, :] * b
    tl.store(out_ptr + (i * n + js[:, None]) * channels + cs[None, :], acc, mask=j_ok[:, None] & c_ok[None, :])


def triangle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n, _, channels = a.shape
    out = torch.empty((n, n, channels), device=a.device, dtype=torch.float32)
    grid = (n, triton.cdiv(n, BLOCK_J), triton.cdiv(channels, BLOCK_C))
    triangle_kernel[grid](a, b, out, n, channels, BLOCK_J=BLOCK_J, BLOCK_C=BLOCK_C, num_warps=4)
    return out
