"""Prefill linear layers: a tiled tensor-core GEMM, out[M,N] = x[M,K]·w[N,K]ᵀ (+ bias), fp32 accumulation."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import exact_dot, mma


@triton.jit
def ks_gemm(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_x, stride_w, stride_out,
            HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, GROUP_M: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Grouped tile order: neighbouring programs share weight tiles in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_size = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % group_size
    pid_n = (pid % (GROUP_M * tiles_n)) // group_size
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # int32 offsets from scalar bases that move along K (fewer registers than tensors of pointers);
    # every matrix here has < 2**31 elements.
    x_offs = rows[:, None] * stride_x + ks[None, :]
    w_offs = cols[None, :] * stride_w + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for start in range(0, K, BLOCK_K):
        k_mask = (start + ks) < K
        x = tl.load(x_ptr + start + x_offs, mask=(rows[:, None] < M) & k_mask[None, :], other=0.0)
        w = tl.load(w_ptr + start + w_offs, mask=(cols[None, :] < N) & k_mask[:, None], other=0.0)
        acc = mma(x, w, acc, IEEE)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def _config(m: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by the number of rows."""
    if m <= 64:
        return 64, 64, 64, 4, 4
    return 128, 128, 64, 8, 3


def gemm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    (m, k), n = x.shape, w.shape[0]
    block_m, block_n, block_k, warps, stages = _config(m)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    ks_gemm[grid](x, w, bias if bias is not None else w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
                  HAS_BIAS=bias is not None, IEEE=exact_dot(x.dtype), GROUP_M=8,
                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
