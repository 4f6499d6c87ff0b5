"""Rotary position embedding (HF's half-split `rotate_half` form) on q and k in one launch; prefill's q/k/v split
with rope and the KV-cache write in one launch."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from ..errors import EngineError
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


@triton.jit
def ks_qkv_rope_cache(qkv_ptr, q_ptr, kc_ptr, vc_ptr, pos_ptr, inv_freq_ptr, L, H, HKV, HALF, stride_qkv,
                      stride_cb, stride_cs, stride_ch, BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Prefill's q/k/v split in one launch, one program per token (its cos/sin computed once for all heads):
    q heads roped into q [T,H,Dh], k heads roped into the K cache, v heads copied into the V cache, at the
    token's slot (prompts start at slot 0)."""
    token = tl.program_id(0).to(tl.int64)
    seq, slot = token // L, token % L
    dtype = q_ptr.dtype.element_ty
    heads = tl.arange(0, BLOCK_HEADS)
    j = tl.arange(0, BLOCK_HALF)
    mask = (heads < H + 2 * HKV)[:, None] & (j < HALF)[None, :]
    src = qkv_ptr + token * stride_qkv + heads[:, None] * 2 * HALF + j[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    cos, sin = rope_cos_sin(tl.load(pos_ptr + token), inv_freq_ptr, HALF, dtype, BLOCK_HALF)
    r1, r2 = rope_rotate(x1, x2, cos[None, :], sin[None, :], dtype)
    is_q = (heads < H)[:, None]
    is_v = (heads >= H + HKV)[:, None]
    out1 = tl.where(is_v, x1.to(dtype), r1)
    out2 = tl.where(is_v, x2.to(dtype), r2)
    kv_head = tl.where(heads >= H + HKV, heads - H - HKV, heads - H)
    cache_off = seq * stride_cb + slot * stride_cs + kv_head[:, None] * stride_ch + j[None, :]
    q_off = (token * H + heads[:, None]) * 2 * HALF + j[None, :]
    tl.store(q_ptr + q_off, out1, mask=mask & is_q)
    tl.store(q_ptr + q_off + HALF, out2, mask=mask & is_q)
    k_mask = mask & ~is_q & ~is_v
    tl.store(kc_ptr + cache_off, out1, mask=k_mask)
    tl.store(kc_ptr + cache_off + HALF, out2, mask=k_mask)
    tl.store(vc_ptr + cache_off, out1, mask=mask & is_v)
    tl.store(vc_ptr + cache_off + HALF, out2, mask=mask & is_v)


def qkv_rope_cache(qkv: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """qkv [B,L,(H+2·Hkv)·Dh] → q [B,L,H,Dh] roped; roped k and v into the caches' slots 0..L-1."""
    batch, length, width = qkv.shape
    head_dim = k_cache.shape[-1]
    if width != (num_heads + 2 * num_kv_heads) * head_dim or length > k_cache.shape[1]:
        raise EngineError(f"qkv of shape {list(qkv.shape)} does not fit {num_heads} + 2·{num_kv_heads} heads of "
                          f"{head_dim} or the cache's {k_cache.shape[1]} slots")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise EngineError("the K and V caches need the same layout with a contiguous head dim")
    rows = qkv.reshape(batch * length, width)  # a view for the linear layer's contiguous output
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    q = torch.empty((batch, length, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    tokens, heads = batch * length, num_heads + 2 * num_kv_heads
    nbytes = 2 * tokens * width * qkv.element_size() + tokens * positions.element_size() + inv_freq.numel() * 4
    with declare("ks_qkv_rope_cache", 3 * tokens * (num_heads + num_kv_heads) * head_dim, nbytes, VECTOR):
        ks_qkv_rope_cache[(tokens,)](
            rows, q, k_cache, v_cache, positions, inv_freq, length, num_heads, num_kv_heads, head_dim // 2,
            rows.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            BLOCK_HEADS=pow2(heads), BLOCK_HALF=pow2(head_dim // 2))
    return q
