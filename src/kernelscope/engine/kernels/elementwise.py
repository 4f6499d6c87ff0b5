"""Memory-bound elementwise kernels: add, embedding gather, swiglu, prefill KV-cache write."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from ..errors import EngineError
from .common import VECTOR, new_or, pdl_options, pdl_prologue, pow2

_BLOCK = 1024


@triton.jit
def ks_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = new_or(out, tuple(x.shape), x)
    n = x.numel()
    with declare("ks_add", n, 3 * n * x.element_size(), VECTOR):
        ks_add[(triton.cdiv(n, _BLOCK),)](x, y, out, n, BLOCK=_BLOCK)
    return out


@triton.jit
def ks_embedding(ids_ptr, table_ptr, out_ptr, D, stride_table, BLOCK_D: tl.constexpr, PDL: tl.constexpr):
    pdl_prologue(PDL)
    row = tl.program_id(0)
    token = tl.load(ids_ptr + row).to(tl.int64)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        values = tl.load(table_ptr + token * stride_table + cols, mask=cols < D)
        tl.store(out_ptr + row.to(tl.int64) * D + cols, values, mask=cols < D)


def embedding(ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    tokens, dim = ids.numel(), table.shape[1]
    out = new_or(out, (tokens, dim), table)
    nbytes = tokens * ids.element_size() + 2 * tokens * dim * table.element_size()
    with declare("ks_embedding", 0, nbytes, VECTOR):
        ks_embedding[(tokens,)](ids.contiguous(), table, out, dim, table.stride(0),
                                BLOCK_D=min(pow2(dim), 1024), **pdl_options(table.device))
    return out


@triton.jit
def ks_swiglu(gu_ptr, out_ptr, F, stride_gu, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    gate = tl.load(gu_ptr + row * stride_gu + cols, mask=mask).to(tl.float32)
    up = tl.load(gu_ptr + row * stride_gu + F + cols, mask=mask).to(tl.float32)
    # Round silu(gate) to the activation dtype before the product, as HF's act_fn(gate) * up does.
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * F + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def swiglu(gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    tokens, ffn = gate_up.shape[0], gate_up.shape[1] // 2
    if gate_up.stride(1) != 1:
        gate_up = gate_up.contiguous()
    out = new_or(out, (tokens, ffn), gate_up)
    with declare("ks_swiglu", 5 * tokens * ffn, 3 * tokens * ffn * gate_up.element_size(), VECTOR):
        ks_swiglu[(tokens, triton.cdiv(ffn, _BLOCK))](gate_up, out, ffn, gate_up.stride(0), BLOCK=_BLOCK)
    return out


@triton.jit
def ks_kv_cache_write(k_ptr, v_ptr, kc_ptr, vc_ptr, L, start, row_len,
                      stride_kb, stride_kl, stride_vb, stride_vl, stride_cb, stride_cl, BLOCK: tl.constexpr):
    token = tl.program_id(0)
    b, pos = token // L, token % L
    cols = tl.arange(0, BLOCK)
    mask = cols < row_len
    dst = b.to(tl.int64) * stride_cb + (start + pos).to(tl.int64) * stride_cl + cols
    k = tl.load(k_ptr + b.to(tl.int64) * stride_kb + pos.to(tl.int64) * stride_kl + cols, mask=mask)
    v = tl.load(v_ptr + b.to(tl.int64) * stride_vb + pos.to(tl.int64) * stride_vl + cols, mask=mask)
    tl.store(kc_ptr + dst, k, mask=mask)
    tl.store(vc_ptr + dst, v, mask=mask)


def kv_cache_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   start: int) -> None:
    """k, v [B,L,Hkv,Dh] (heads and head dim contiguous) into caches [B,S,Hkv,Dh] at slots start..start+L."""
    batch, length, kv_heads, head_dim = k.shape
    if start < 0 or start + length > k_cache.shape[1]:
        raise EngineError(f"KV-cache write of slots {start}..{start + length} past the cache's {k_cache.shape[1]}")
    row_len = kv_heads * head_dim
    if k_cache.stride() != v_cache.stride() or k_cache.stride(3) != 1 or k_cache.stride(2) != head_dim:
        raise EngineError("the K and V caches need the same [B, S, Hkv, Dh] layout, heads contiguous")
    if k.stride(2) != head_dim or k.stride(3) != 1:
        k = k.contiguous()
    if v.stride(2) != head_dim or v.stride(3) != 1:
        v = v.contiguous()
    nbytes = 4 * batch * length * row_len * k.element_size()
    with declare("ks_kv_cache_write", 0, nbytes, VECTOR):
        ks_kv_cache_write[(batch * length,)](
            k, v, k_cache, v_cache, length, start, row_len, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            k_cache.stride(0), k_cache.stride(1), BLOCK=pow2(row_len))
