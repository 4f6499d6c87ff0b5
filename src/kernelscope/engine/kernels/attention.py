"""Attention: causal flash attention for prefill, split-KV decode attention combined in the same launch (GQA both)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from ..errors import EngineError
from .common import exact_dot, launch_counters, matrix_precision, mma, new_or, pdl_options, pdl_prologue, pow2

_LOG2E = 1.4426950408889634


@triton.jit
def _prefill_block(acc, row_max, row_sum, q, k_ptr, v_ptr, k_offs, v_offs, rows, cols, L, scale_log2,
                   CAUSAL: tl.constexpr, IEEE: tl.constexpr):
    """One key/value block of online softmax; CAUSAL blocks (the diagonal) mask future and out-of-range keys."""
    k = tl.load(k_ptr + k_offs, mask=(cols < L)[:, None], other=0.0)
    scores = mma(q, tl.trans(k), tl.zeros((q.shape[0], k.shape[0]), tl.float32), IEEE) * scale_log2
    if CAUSAL:
        scores = tl.where((cols[None, :] <= rows[:, None]) & (cols[None, :] < L), scores, float("-inf"))
    new_max = tl.maximum(row_max, tl.max(scores, axis=1))
    p = tl.exp2(scores - new_max[:, None])
    correction = tl.exp2(row_max - new_max)
    row_sum = row_sum * correction + tl.sum(p, axis=1)
    v = tl.load(v_ptr + v_offs, mask=(cols < L)[:, None], other=0.0)
    acc = mma(p.to(v.dtype), v, acc * correction[:, None], IEEE)
    return acc, new_max, row_sum


@triton.jit
def ks_attn_prefill(q_ptr, k_ptr, v_ptr, o_ptr, L, H, GROUP, scale_log2,
                    stride_qb, stride_ql, stride_qh, stride_kb, stride_kl, stride_kh,
                    stride_vb, stride_vl, stride_vh, HEAD_DIM: tl.constexpr, IEEE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Causal flash attention for one (query block, sequence, head); HEAD_DIM is a power of two."""
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    kv_h = h // GROUP
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ds = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + h * stride_qh + rows[:, None].to(tl.int64) * stride_ql
                + ds[None, :], mask=(rows < L)[:, None], other=0.0)
    k_ptr += b.to(tl.int64) * stride_kb + kv_h * stride_kh
    v_ptr += b.to(tl.int64) * stride_vb + kv_h * stride_vh
    # int32 offsets inside a block; the blocks' bases move by whole rows (fewer registers than pointer tensors).
    k_offs = tl.arange(0, BLOCK_N)[:, None] * stride_kl + ds[None, :]
    v_offs = tl.arange(0, BLOCK_N)[:, None] * stride_vl + ds[None, :]
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    # Blocks wholly before the query block need no mask; the rest (the diagonal) do.
    unmasked_end = (block_m * BLOCK_M) // BLOCK_N * BLOCK_N
    for start in range(0, unmasked_end, BLOCK_N):
        acc, row_max, row_sum = _prefill_block(
            acc, row_max, row_sum, q, k_ptr + start * stride_kl, v_ptr + start * stride_vl,
            k_offs, v_offs, rows, start + tl.arange(0, BLOCK_N), L, scale_log2, False, IEEE)
    for start in range(unmasked_end, tl.minimum((block_m + 1) * BLOCK_M, L), BLOCK_N):
        acc, row_max, row_sum = _prefill_block(
            acc, row_max, row_sum, q, k_ptr + start * stride_kl, v_ptr + start * stride_vl,
            k_offs, v_offs, rows, start + tl.arange(0, BLOCK_N), L, scale_log2, True, IEEE)
    out = acc / row_sum[:, None]
    o_off = ((b.to(tl.int64) * L + rows[:, None]) * H + h) * HEAD_DIM + ds[None, :]
    tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=(rows < L)[:, None])


def _prefill_config(length: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages): 64 × 64 tiles at every length, the fastest of an H100 sweep at
    qwen2-1.5b head shapes (benchmarks/engine/attention_sweep.py; results/engine-limits-h100-2026-11-25: at 2,048
    tokens 48.8 µs against 61.0 µs for 128 × 64 with 8 warps), a third pipeline stage from 512 tokens."""
    if length > 256:
        return 64, 64, 4, 3
    return (64, 64, 4, 2) if length > 32 else (32, 32, 4, 2)


def attention_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B,L,H,Dh], k/v [B,L,Hkv,Dh] (head dim contiguous, other dims may be strided) → [B,L,H,Dh]."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    batch, length, heads, head_dim = q.shape
    if head_dim != pow2(head_dim, 16):
        raise EngineError(f"attention needs a power-of-two head dim of at least 16, not {head_dim}")
    kv_heads = k.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    block_m, block_n, warps, stages = _prefill_config(length)
    pairs = length * (length + 1) // 2
    flops = 4 * batch * heads * head_dim * pairs
    nbytes = (q.numel() + k.numel() + v.numel() + out.numel()) * q.element_size()
    with declare("ks_attn_prefill", flops, nbytes, matrix_precision(q.dtype)):
        ks_attn_prefill[(triton.cdiv(length, block_m), batch * heads)](
            q, k, v, out, length, heads, heads // kv_heads, scale * _LOG2E,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), HEAD_DIM=head_dim, IEEE=exact_dot(q.dtype),
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    return out


@triton.jit
def ks_attn_decode_split(q_ptr, kc_ptr, vc_ptr, len_ptr, part_o_ptr, part_lse_ptr, count_ptr, o_ptr, H, HKV, GROUP,
                         HEAD_DIM, SPLITS, split_len, scale_log2, stride_cb, stride_cs, stride_ch, stride_ob,
                         stride_oh, IEEE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr,
                         BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr, PDL: tl.constexpr):
    """One (sequence, KV head, split): all GROUP query heads of that KV head attend to the split's slots and write
    their partial output and log-sum-exp; the last split to finish of a (sequence, KV head) combines them all.

    count_ptr holds one counter per (sequence, KV head), zero between launches: each program increments it after
    its partials (acq_rel, after a CTA barrier so every thread's stores are ordered before the release); the
    program that sees SPLITS - 1 reads the partials of all splits (acquire) and sets the counter back to 0.
    """
    pdl_prologue(PDL)
    bk = tl.program_id(0)
    split = tl.program_id(1)
    b, kv_h = bk // HKV, bk % HKV
    gs = tl.arange(0, BLOCK_G)
    ds = tl.arange(0, BLOCK_D)
    g_mask = gs < GROUP
    d_mask = ds < HEAD_DIM
    heads = kv_h * GROUP + gs
    q = tl.load(q_ptr + (b * H + heads[:, None]) * HEAD_DIM + ds[None, :], mask=g_mask[:, None] & d_mask[None, :],
                other=0.0)
    length = tl.load(len_ptr + b).to(tl.int32)
    first = split * split_len
    last = tl.minimum(first + split_len, length)
    base = b.to(tl.int64) * stride_cb + kv_h * stride_ch
    row_max = tl.full((BLOCK_G,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_G,), tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), tl.float32)
    for start in range(first, last, BLOCK_S):
        slots = start + tl.arange(0, BLOCK_S)
        kv_mask = (slots[:, None] < last) & d_mask[None, :]
        offs = base + slots[:, None].to(tl.int64) * stride_cs + ds[None, :]
        k = tl.load(kc_ptr + offs, mask=kv_mask, other=0.0)
        scores = mma(q, tl.trans(k), tl.zeros((BLOCK_G, BLOCK_S), tl.float32), IEEE) * scale_log2
        scores = tl.where((slots < last)[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        p = tl.exp2(scores - new_max[:, None])
        correction = tl.exp2(row_max - new_max)
        row_sum = row_sum * correction + tl.sum(p, axis=1)
        v = tl.load(vc_ptr + offs, mask=kv_mask, other=0.0)
        acc = mma(p.to(v.dtype), v, acc * correction[:, None], IEEE)
        row_max = new_max
    # An empty split (past the sequence's length) leaves lse = -inf and contributes nothing.
    has_any = row_sum > 0.0
    out = tl.where(has_any[:, None], acc / tl.where(has_any, row_sum, 1.0)[:, None], 0.0)
    lse = tl.where(has_any, row_max + tl.log2(tl.where(has_any, row_sum, 1.0)), float("-inf"))
    part = (b * H + heads) * SPLITS + split
    tl.store(part_o_ptr + part[:, None] * HEAD_DIM + ds[None, :], out, mask=g_mask[:, None] & d_mask[None, :])
    tl.store(part_lse_ptr + part, lse, mask=g_mask)
    tl.debug_barrier()
    finished = tl.atomic_add(count_ptr + bk, 1, sem="acq_rel", scope="gpu")
    if finished == SPLITS - 1:
        # Combine the GROUP heads (BLOCK_H ≥ GROUP rows, no tensor-core padding here) over the splits holding
        # slots (the others have lse = -inf), BLOCK_C splits at a time, each chunk merged into the running result
        # relative to the running maximum log-sum-exp.
        active = tl.minimum(tl.cdiv(length, split_len), SPLITS)
        hs = tl.arange(0, BLOCK_H)
        cs = tl.arange(0, BLOCK_C)
        h_mask = hs < GROUP
        group_heads = kv_h * GROUP + hs
        part_heads = (b * H + group_heads) * SPLITS
        best = tl.full((BLOCK_H,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_H,), tl.float32)
        merged = tl.zeros((BLOCK_H, BLOCK_D), tl.float32)
        for chunk in range(0, active, BLOCK_C):
            rows = part_heads[:, None] + (chunk + cs)[None, :]
            row_mask = h_mask[:, None] & ((chunk + cs) < active)[None, :]
            lses = tl.load(part_lse_ptr + rows, mask=row_mask, other=float("-inf"))
            parts = tl.load(part_o_ptr + rows[:, :, None] * HEAD_DIM + ds[None, None, :],
                            mask=row_mask[:, :, None] & d_mask[None, None, :], other=0.0)
            new_best = tl.maximum(best, tl.max(lses, axis=1))
            shift = tl.where(new_best == float("-inf"), 0.0, new_best)  # padding heads: no valid split
            weights = tl.exp2(lses - shift[:, None])
            correction = tl.exp2(best - shift)
            total = total * correction + tl.sum(weights, axis=1)
            merged = merged * correction[:, None] + tl.sum(parts * weights[:, :, None], axis=1)
            best = new_best
        result = merged / total[:, None]
        tl.store(o_ptr + b.to(tl.int64) * stride_ob + group_heads[:, None] * stride_oh + ds[None, :],
                 result.to(o_ptr.dtype.element_ty), mask=h_mask[:, None] & d_mask[None, :])
        tl.store(count_ptr + bk, 0)


# (BLOCK_S, num_warps, num_stages) of decode attention, from an H100 sweep at qwen2-1.5b head shapes
# (benchmarks/engine/attention_sweep.py --decode; results/engine-limits-h100-2026-11-25/sweeps): 8 warps read a
# 2,048-token context in 8.65 µs against 12.54 µs with 4, and are no slower at 256 tokens or batch 8.
DECODE_CONFIG = (64, 8, 2)
# Programs aimed for: about 2 per SM of an H100.
DECODE_PROGRAMS = 264


def decode_splits(batch: int, kv_heads: int, slots: int, block: int) -> int:
    """Splits of the cache so that about 2 programs per SM of an H100 run, from shapes only (graph-safe)."""
    return max(1, min(triton.cdiv(slots, block), triton.cdiv(DECODE_PROGRAMS, batch * kv_heads), 64))


def split_counters(device: torch.device, count: int) -> torch.Tensor:
    """The zeroed int32 counters of `count` (sequence, KV head) pairs of ks_attn_decode_split."""
    return launch_counters("attention_decode", device, count)


def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                     scale: float, out: torch.Tensor | None = None, kv_tokens: int | None = None) -> torch.Tensor:
    """q [B,H,Dh], caches [B,S,Hkv,Dh], lengths [B] valid slots (device) → [B,H,Dh].

    One launch: split-KV partials, combined by the last split of each (sequence, KV head).
    kv_tokens (the host-side sum of lengths, when the caller knows it) only sharpens the declared cost;
    without it the cost assumes every slot is valid.
    """
    q = q.contiguous()
    batch, heads, head_dim = q.shape
    slots, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    block_s, warps, stages = DECODE_CONFIG
    splits = decode_splits(batch, kv_heads, slots, block_s)
    split_len = triton.cdiv(triton.cdiv(slots, splits), block_s) * block_s
    out = new_or(out, (batch, heads, head_dim), q)
    part_o = torch.empty((batch, heads, splits, head_dim), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    counters = split_counters(q.device, batch * kv_heads)
    tokens = batch * slots if kv_tokens is None else kv_tokens
    es = q.element_size()
    block_h, block_d = pow2(group), pow2(head_dim, 16)
    # The combine reads BLOCK_C splits' partials of the group at once: at most 4096 fp32 values (32 per thread).
    block_c = max(1, min(pow2(splits), 4096 // (block_h * block_d)))
    # Costs as the former split + combine pair: partials written, then read by the combine.
    part_bytes = (part_o.numel() + part_lse.numel()) * 4
    split_bytes = q.numel() * es + 2 * tokens * kv_heads * head_dim * es + lengths.numel() * lengths.element_size()
    flops = 4 * tokens * heads * head_dim + 3 * batch * heads * splits * head_dim
    nbytes = split_bytes + 2 * part_bytes + out.numel() * es
    with declare("ks_attn_decode_split", flops, nbytes, matrix_precision(q.dtype)):
        ks_attn_decode_split[(batch * kv_heads, splits)](
            q, k_cache, v_cache, lengths, part_o, part_lse, counters, out, heads, kv_heads, group, head_dim, splits,
            split_len, scale * _LOG2E, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            out.stride(0), out.stride(1), IEEE=exact_dot(q.dtype), BLOCK_G=pow2(group, 16), BLOCK_S=block_s,
            BLOCK_D=block_d, BLOCK_H=block_h, BLOCK_C=block_c, num_warps=warps, num_stages=stages,
            **pdl_options(q.device))
    return out
