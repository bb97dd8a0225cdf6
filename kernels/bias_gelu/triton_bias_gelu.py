"""The Triton baseline for bias + GELU (tanh form, as the reference), 1024 elements per program."""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, total, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    z = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(bias_ptr + offs % cols, mask=mask, other=0.0)
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    # tanh(u) = 1 - 2 / (exp(2u) + 1), which saturates to +-1 instead of overflowing.
    tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
    tl.store(out_ptr + offs, 0.5 * z * (1.0 + tanh_u), mask=mask)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    total = x.numel()
    bias_gelu_kernel[(triton.cdiv(total, BLOCK),)](x, bias, out, total, x.shape[1], BLOCK=BLOCK, num_warps=4)
    return out
