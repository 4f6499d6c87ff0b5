"""Attention: causal flash attention for prefill, split-KV decode attention combined in the same launch (GQA both)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
def _decode_combine(part_o_ptr, part_lse_ptr, o_ptr, b, kv_h, H, GROUP, HEAD_DIM, SPLITS, active, stride_ob,
                    stride_oh, BLOCK_H: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr):
    """Merge the `active` splits' partials of one (sequence, KV head) into its GROUP heads' output: BLOCK_H ≥ GROUP
    rows (no tensor-core padding here), BLOCK_C splits at a time, each chunk merged into the running result
    relative to the running maximum log-sum-exp."""
    hs = tl.arange(0, BLOCK_H)
    cs = tl.arange(0, BLOCK_C)
    ds = tl.arange(0, BLOCK_D)
    h_mask = hs < GROUP
    d_mask = ds < HEAD_DIM
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


@triton.jit
def ks_attn_decode_split(q_ptr, kc_ptr, vc_ptr, len_ptr, part_o_ptr, part_lse_ptr, count_ptr, o_ptr, H, GROUP,
                         HEAD_DIM, scale_log2, stride_cb, stride_cs, stride_ch, stride_ob, stride_oh,
                         HKV: tl.constexpr, SPLITS: tl.constexpr, GRANULE: tl.constexpr, IEEE: tl.constexpr,
                         BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr,
                         BLOCK_C: tl.constexpr, BLOCK_C_MID: tl.constexpr, BLOCK_C_SMALL: tl.constexpr,
                         PDL: tl.constexpr):
    """One (sequence, KV head, split): all GROUP query heads of that KV head attend to the split's slots and write
    their partial output and log-sum-exp; the last split to finish of a (sequence, KV head) combines them all.

    The split length follows the sequence's live length (read here, so a CUDA graph replays it at any length):
    the fewest multiple of GRANULE slots that lets the SPLITS programs launched per (sequence, KV head) cover
    it, read BLOCK_S slots a step (a GRANULE below BLOCK_S leaves the rest of a step masked). The `active` =
    ceil(length / split_len) splits holding slots work (split 0 also at length 0); the other programs stop after
    loading q and the length (no partials, no counter). count_ptr holds one counter per (sequence, KV head), zero
    between launches: each active program increments it after its partials (acq_rel, after a CTA barrier so
    every thread's stores are ordered before the release); the program that sees active - 1 combines the active
    splits' partials (acquire), in one chunk of BLOCK_C_SMALL or BLOCK_C_MID splits when that holds them all,
    else BLOCK_C at a time, and sets the counter back to 0.
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
    # q is loaded by every program, with the length, so that its latency overlaps the length's.
    q = tl.load(q_ptr + (b * H + heads[:, None]) * HEAD_DIM + ds[None, :], mask=g_mask[:, None] & d_mask[None, :],
                other=0.0)
    length = tl.load(len_ptr + b).to(tl.int32)
    # Divisions by constants only (HKV, SPLITS, GRANULE constexpr) before the first K/V load.
    split_len = tl.maximum(tl.cdiv(tl.cdiv(length, SPLITS), GRANULE), 1) * GRANULE
    first = split * split_len
    if (first < length) | (split == 0):  # split 0 also works at length 0: its (0/0) output is still written
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
        # An empty split (only at length 0) leaves lse = -inf.
        has_any = row_sum > 0.0
        out = tl.where(has_any[:, None], acc / tl.where(has_any, row_sum, 1.0)[:, None], 0.0)
        lse = tl.where(has_any, row_max + tl.log2(tl.where(has_any, row_sum, 1.0)), float("-inf"))
        part = (b * H + heads) * SPLITS + split
        tl.store(part_o_ptr + part[:, None] * HEAD_DIM + ds[None, :], out, mask=g_mask[:, None] & d_mask[None, :])
        tl.store(part_lse_ptr + part, lse, mask=g_mask)
        active = tl.maximum(tl.cdiv(length, split_len), 1)  # off the path to the first K/V load
        tl.debug_barrier()
        finished = tl.atomic_add(count_ptr + bk, 1, sem="acq_rel", scope="gpu")
        if finished == active - 1:
            # A chunk wider than the active splits costs time (masked lanes, registers): the narrowest that holds
            # them all, else a loop over the widest.
            if active <= BLOCK_C_SMALL:
                _decode_combine(part_o_ptr, part_lse_ptr, o_ptr, b, kv_h, H, GROUP, HEAD_DIM, SPLITS, active,
                                stride_ob, stride_oh, BLOCK_H, BLOCK_C_SMALL, BLOCK_D)
            elif active <= BLOCK_C_MID:
                _decode_combine(part_o_ptr, part_lse_ptr, o_ptr, b, kv_h, H, GROUP, HEAD_DIM, SPLITS, active,
                                stride_ob, stride_oh, BLOCK_H, BLOCK_C_MID, BLOCK_D)
            else:
                _decode_combine(part_o_ptr, part_lse_ptr, o_ptr, b, kv_h, H, GROUP, HEAD_DIM, SPLITS, active,
                                stride_ob, stride_oh, BLOCK_H, BLOCK_C, BLOCK_D)
            tl.store(count_ptr + bk, 0)


@dataclass(frozen=True)
class DecodePlan:
    """How decode attention splits the cache, from shapes only (graph-safe): `splits` programs per (sequence, KV
    head) are launched; at run time each sequence's splits are `split_len(length)` slots long (see
    ks_attn_decode_split); `block_s` slots per loop step; `combine` = the most fp32 partial values the combine
    reads at once (BLOCK_H · BLOCK_C · BLOCK_D)."""

    splits: int
    granule: int
    block_s: int
    warps: int
    stages: int
    combine: int

    def split_len(self, length: int) -> int:
        return max(1, triton.cdiv(triton.cdiv(length, self.splits), self.granule)) * self.granule

    def active(self, length: int) -> int:
        """Splits that hold slots (the programs that work) for a sequence of `length` valid slots."""
        return max(1, triton.cdiv(length, self.split_len(length)))


# Decode attention's plan, from H100 sweeps at llama-3-8b and qwen2-1.5b head shapes, batch 1 and 8, contexts
# 201–2,200 in a 2,304-slot cache (benchmarks/engine/decode_attention_sweep.py;
# results/engine-attention-h100-2026-11-26). Launch-bound at these contexts (a 201-token llama-3-8b context is 0.8 MB, 0.3 µs at the copy
# rate), so what counts is the serial path of one program: one 64-slot step per program while the context allows
# (the K/V loop is not software-pipelined: each further step is another DRAM round trip), and a combine that
# reads the active splits' partials in as few chunks as it can (each further chunk is another L2 round trip; a
# chunk wider than needed costs ~0.25 µs per doubling, hence three chunk widths). µs per launch at 201 / 1,000 /
# 2,048 tokens, the static split this plan replaced (split length from the capacity: 33 splits of 128 slots at llama-3-8b
# batch 1; call 3 of that folder) → this plan (call 4, "Cap validation"; one pass per tree, and the same plan
# moved by up to 0.5 µs between calls): llama-3-8b batch 1 6.95 / 8.10 / 11.43 → 4.43 / 7.11 / 9.87, batch 8
# 11.93 / 23.89 / 30.48 → 7.46 / 16.73 / 29.03; qwen2-1.5b batch 1 5.02 / 6.38 / 8.31 → 4.83 / 5.82 / 7.37,
# batch 8 8.83 / 10.94 / 13.78 → 5.53 / 9.04 / 11.77.
DECODE_BLOCK = 64  # slots: the split granule and one loop step
DECODE_PROGRAMS = 264  # programs aimed for: about 2 per SM of an H100
# Splits per (sequence, KV head), at most (the static split's cap): the splits are also bounded by the cache's 64-slot
# pieces and by DECODE_PROGRAMS, so qwen2-1.5b batch 1 gets 36 (its whole 2,304-slot cache in one step per
# program), llama-3-8b batch 1 33 (one step up to 2,112 tokens, two beyond), qwen2-1.5b batch 8 17, llama-3-8b
# batch 8 5. A cap of 16 (every active split in one combine chunk) left qwen2-1.5b batch 1 three serial steps
# per program from 2,049 tokens: its decode after a 2,048-token prompt was 1.7120 ms at HEAD, 1.7200 with the
# cap of 16, 1.7042 with this one (side by side, call 4). That cap was faster per launch at llama-3-8b batch 1
# past 1,000 tokens in call 4's sweep (6.46 / 9.04 / 10.52 against 7.11 / 9.87 / 11.41 µs at 1,000 / 2,048 /
# 2,200 tokens; not measured end to end), and by 1.2 µs a step at llama-3-8b batch 1 and 1.0 µs at qwen2-1.5b
# batch 1 after 128-token prompts (5.5183 against 5.5195 ms, 1.6005 against 1.6015 ms side by side; each tree's
# two rounds within 0.5 µs); the same at qwen2-1.5b batch 8.
DECODE_MAX_SPLITS = 64
DECODE_STAGES = 2


def decode_plan(batch: int, kv_heads: int, group: int, head_dim: int, slots: int) -> DecodePlan:
    """The split plan of decode attention for these shapes (a CUDA graph fixes it at capture).

    Warps: 4 where a (sequence, KV head)'s partials are at most 4 heads × 128 dims (llama-3-8b: 4 warps ran
    5.28 against 5.84 µs at 8 at 201 tokens, 9.43 against 9.82 at 2,048), else 8, so that the combine holds
    16 splits at 64 fp32 values a thread without spilling (qwen2-1.5b, 6 heads a group: 4 warps with the same
    chunk spilled 276 bytes; at batch 8, 8 warps ran 11.52 against 12.22 µs at 2,048 tokens).
    """
    block_h, block_d = pow2(group), pow2(head_dim, 16)
    warps = 4 if block_h * block_d <= 512 else 8
    combine = 64 * 32 * warps
    # More active splits than one combine chunk holds (16 at these shapes) are combined in chunks, an L2 round
    # trip each: at qwen2-1.5b batch 1 that cost less than a further K/V step per program (2,048 tokens: 32
    # single-step splits in 2 chunks 7.37 µs against 16 two-step splits in one chunk 7.70), at llama-3-8b batch 1
    # more (9.87 against 9.04; see DECODE_MAX_SPLITS).
    splits = max(1, min(triton.cdiv(slots, DECODE_BLOCK), triton.cdiv(DECODE_PROGRAMS, batch * kv_heads),
                        DECODE_MAX_SPLITS))
    return DecodePlan(splits, DECODE_BLOCK, DECODE_BLOCK, warps, DECODE_STAGES, combine)


def split_counters(device: torch.device, count: int) -> torch.Tensor:
    """The zeroed int32 counters of `count` (sequence, KV head) pairs of ks_attn_decode_split."""
    return launch_counters("attention_decode", device, count)


def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                     scale: float, out: torch.Tensor | None = None,
                     kv_tokens: int | Sequence[int] | None = None) -> torch.Tensor:
    """q [B,H,Dh], caches [B,S,Hkv,Dh], lengths [B] valid slots (device) → [B,H,Dh].

    One launch: split-KV partials, combined by the last split of each (sequence, KV head).
    kv_tokens, the host's count of valid slots when the caller knows it, only sharpens the declared cost: a
    sequence of B lengths, or their sum when every sequence holds the same number (as in Engine.generate);
    without it the cost assumes every slot is valid.
    """
    q = q.contiguous()
    batch, heads, head_dim = q.shape
    slots, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    plan = decode_plan(batch, kv_heads, group, head_dim, slots)
    splits = plan.splits
    out = new_or(out, (batch, heads, head_dim), q)
    part_o = torch.empty((batch, heads, splits, head_dim), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=q.device)
    counters = split_counters(q.device, batch * kv_heads)
    if kv_tokens is None:
        per_sequence, tokens = [slots] * batch, batch * slots
    elif isinstance(kv_tokens, int):
        per_sequence, tokens = [kv_tokens // batch] * batch, kv_tokens
    else:
        per_sequence = [int(n) for n in kv_tokens]
        tokens = sum(per_sequence)
    active = sum(plan.active(n) for n in per_sequence)
    es = q.element_size()
    block_h, block_d = pow2(group), pow2(head_dim, 16)
    # The combine reads BLOCK_C splits' partials of the group at once.
    block_c = max(1, min(pow2(splits), plan.combine // (block_h * block_d)))
    block_c_mid, block_c_small = max(1, block_c // 2), max(1, block_c // 4)
    # Partials: written by the active splits, read back once by the combine.
    part_bytes = active * heads * (head_dim + 1) * 4
    split_bytes = q.numel() * es + 2 * tokens * kv_heads * head_dim * es + lengths.numel() * lengths.element_size()
    flops = 4 * tokens * heads * head_dim + 3 * active * heads * head_dim
    nbytes = split_bytes + 2 * part_bytes + out.numel() * es
    with declare("ks_attn_decode_split", flops, nbytes, matrix_precision(q.dtype)):
        ks_attn_decode_split[(batch * kv_heads, splits)](
            q, k_cache, v_cache, lengths, part_o, part_lse, counters, out, heads, group, head_dim, scale * _LOG2E,
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1), HKV=kv_heads,
            SPLITS=splits, GRANULE=plan.granule, IEEE=exact_dot(q.dtype), BLOCK_G=pow2(group, 16),
            BLOCK_S=plan.block_s, BLOCK_D=block_d, BLOCK_H=block_h, BLOCK_C=block_c, BLOCK_C_MID=block_c_mid,
            BLOCK_C_SMALL=block_c_small, num_warps=plan.warps, num_stages=plan.stages, **pdl_options(q.device))
    return out
