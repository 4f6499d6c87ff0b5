"""RMSNorm and fused residual-add + RMSNorm (one row per program, the whole row in one block)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from .common import VECTOR, new_or, pow2


@triton.jit
def ks_rms_norm(x_ptr, res_ptr, w_ptr, out_ptr, new_res_ptr, D, stride_x, stride_res, eps,
                HAS_RESIDUAL: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask).to(tl.float32)
    if HAS_RESIDUAL:
        # The residual stream is rounded to the model dtype after the add, as in HF's decoder layer.
        summed = (x + tl.load(res_ptr + row * stride_res + cols, mask=mask).to(tl.float32))
        summed = summed.to(new_res_ptr.dtype.element_ty)
        tl.store(new_res_ptr + row * D + cols, summed, mask=mask)
        x = summed.to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / D + eps)  # rsqrt as torch.rsqrt
    normed = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    tl.store(out_ptr + row * D + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
    x = _rows(x)
    tokens, dim = x.shape
    out = new_or(out, (tokens, dim), x)
    nbytes = (2 * tokens * dim + dim) * x.element_size()
    with declare("ks_rms_norm", 4 * tokens * dim, nbytes, VECTOR):
        ks_rms_norm[(tokens,)](x, x, w, out, out, dim, x.stride(0), x.stride(0), eps,
                               HAS_RESIDUAL=False, BLOCK_D=pow2(dim))
    return out


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x, residual = _rows(x), _rows(residual)
    tokens, dim = x.shape
    out, new_residual = torch.empty_like(x), torch.empty_like(x)
    nbytes = (4 * tokens * dim + dim) * x.element_size()
    with declare("ks_add_rms_norm", 5 * tokens * dim, nbytes, VECTOR):
        ks_rms_norm[(tokens,)](x, residual, w, out, new_residual, dim, x.stride(0), residual.stride(0), eps,
                               HAS_RESIDUAL=True, BLOCK_D=pow2(dim))
    return out, new_residual
