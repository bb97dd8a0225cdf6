"""The Triton baseline for neighbor aggregation: a program per (node, block of features),
walking the node's CSR edge list and adding the gathered rows in registers."""

import torch
import triton
import triton.language as tl


@triton.jit
def neighbor_kernel(x_ptr, indptr_ptr, indices_ptr, out_ptr, features, BLOCK_F: tl.constexpr):
    node = tl.program_id(0).to(tl.int64)
    fs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_ok = fs < features
    start = tl.load(indptr_ptr + node)
    end = tl.load(indptr_ptr + node + 1)
    acc = tl.zeros((BLOCK_F,), dtype=tl.float32)
    for edge in range(start, end):
        neighbour = tl.load(indices_ptr + edge).to(tl.int64)
        acc += tl.load(x_ptr + neighbour * features + fs, mask=f_ok, other=0.0)
    tl.store(out_ptr + node * features + fs, acc, mask=f_ok)


def neighbor_sum(x: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    nodes, features = x.shape
    out = torch.empty_like(x)
    block = min(128, max(16, triton.next_power_of_2(features)))
    neighbor_kernel[(nodes, triton.cdiv(features, block))](x, indptr, indices, out, features, BLOCK_F=block, num_warps=max(1, block // 64))
    return out
