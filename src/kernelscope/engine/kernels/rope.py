"""Rotary position embedding (HF's half-split `rotate_half` form) on q and k in one launch."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from .common import VECTOR, pow2


@triton.jit
def rope_rotate(x1, x2, cos, sin, dtype: tl.constexpr):
    """(x1, x2) halves in fp32 → rotated halves, rounded after each product and the sum as HF does in `dtype`."""
    out1 = (x1 * cos).to(dtype).to(tl.float32) + (-x2 * sin).to(dtype).to(tl.float32)
    out2 = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    return out1.to(dtype), out2.to(dtype)


@triton.jit
def rope_cos_sin(pos, inv_freq_ptr, HALF, dtype: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """cos and sin of pos·inv_freq in fp32, rounded to the activation dtype (HF's rotary embedding)."""
    j = tl.arange(0, BLOCK_HALF)
    freq = pos.to(tl.float32) * tl.load(inv_freq_ptr + j, mask=j < HALF, other=0.0)
    return tl.cos(freq).to(dtype).to(tl.float32), tl.sin(freq).to(dtype).to(tl.float32)


@triton.jit
def ks_rope(q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, inv_freq_ptr, H, HKV, HALF,
            stride_qt, stride_qh, stride_kt, stride_kh, BLOCK_HALF: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    dtype = qo_ptr.dtype.element_ty
    cos, sin = rope_cos_sin(tl.load(pos_ptr + token), inv_freq_ptr, HALF, dtype, BLOCK_HALF)
    j = tl.arange(0, BLOCK_HALF)
    mask = j < HALF
    if head < H:
        src = q_ptr + token * stride_qt + head * stride_qh
        dst = qo_ptr + (token * H + head) * 2 * HALF
    else:
        src = k_ptr + token * stride_kt + (head - H) * stride_kh
        dst = ko_ptr + (token * HKV + head - H) * 2 * HALF
    x1 = tl.load(src + j, mask=mask).to(tl.float32)
    x2 = tl.load(src + HALF + j, mask=mask).to(tl.float32)
    out1, out2 = rope_rotate(x1, x2, cos, sin, dtype)
    tl.store(dst + j, out1, mask=mask)
    tl.store(dst + HALF + j, out2, mask=mask)


def rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
         inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T,H,Dh], k [T,Hkv,Dh] (head dim contiguous; tokens and heads may be strided) → new roped tensors."""
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    tokens, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    q_out, k_out = torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(
        k.shape, dtype=k.dtype, device=k.device)
    elements = tokens * (heads + kv_heads) * head_dim
    nbytes = 2 * elements * q.element_size() + tokens * positions.element_size() + inv_freq.numel() * 4
    with declare("ks_rope", 3 * elements, nbytes, VECTOR):
        ks_rope[(tokens, heads + kv_heads)](
            q, k, q_out, k_out, positions, inv_freq, heads, kv_heads, head_dim // 2,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), BLOCK_HALF=pow2(head_dim // 2))
    return q_out, k_out
