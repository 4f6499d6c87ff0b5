"""Decode GEMV kernels for 1–8 tokens: each program streams BLOCK_N weight rows once for all tokens, over all of
K or, split-K (a second grid dimension), over one part of it: the last part to finish adds the parts up in order
and runs the epilogue, so few-row GEMVs still fill the SMs.

The fused variants put an RMSNorm prologue in front (each program recomputes the norm of its ≤ 8 input rows:
they are short) and an epilogue behind (bias + rope + KV-cache write; residual add; silu·up), rounding where
HF's unfused modules round so greedy tokens match transformers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import mma, pdl_prologue
from .rope import rope_rotate


@triton.jit
def _row_rstd(x_ptr, stride_x, B, K, eps, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
    bs = tl.arange(0, BLOCK_B)
    squares = tl.zeros((BLOCK_B,), tl.float32)
    for start in range(0, K, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + bs[:, None] * stride_x + ks[None, :], mask=(bs[:, None] < B) & (ks[None, :] < K),
                    other=0.0).to(tl.float32)
        squares += tl.sum(x * x, axis=1)
    return tl.math.rsqrt(squares / K + eps)  # rsqrt as torch.rsqrt


@triton.jit
def _gemv_tiles(x_ptr, stride_x, w_ptr, stride_w, rows1, rows2, row_mask, B, K, K_SPLIT, rstd, norm_w_ptr,
                HAS_NORM: tl.constexpr, PAIRED: tl.constexpr, USE_DOT: tl.constexpr, IEEE: tl.constexpr,
                SPLITS: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """x[B,K] (normed when HAS_NORM) times weight rows rows1 (and rows2 when PAIRED): two [BLOCK_B, BLOCK_N],
    over this program's part of K (split program_id(1): [split·K_SPLIT, (split+1)·K_SPLIT)).

    One token (BLOCK_B = 1) multiplies and reduces on the CUDA cores; 2–8 tokens (USE_DOT, rows padded to
    BLOCK_B = 16) use the tensor cores, so each weight tile is read once and multiplied for all tokens.
    """
    dtype = w_ptr.dtype.element_ty
    bs = tl.arange(0, BLOCK_B)
    acc1 = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
    acc2 = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
    w1_rows = w_ptr + rows1[:, None].to(tl.int64) * stride_w
    w2_rows = w_ptr + rows2[:, None].to(tl.int64) * stride_w
    k_start = 0
    k_end = K
    if SPLITS > 1:  # one split keeps the plain loop (fewer registers for the one-token tiles)
        k_start = tl.program_id(1) * K_SPLIT
        k_end = tl.minimum(k_start + K_SPLIT, K)
    for start in range(k_start, k_end, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        k_mask = ks < k_end
        x = tl.load(x_ptr + bs[:, None] * stride_x + ks[None, :], mask=(bs[:, None] < B) & k_mask[None, :],
                    other=0.0).to(tl.float32)
        if HAS_NORM:
            # HF's RMSNorm: weight * (x·rstd).to(dtype), each product rounded to the model dtype.
            norm_w = tl.load(norm_w_ptr + ks, mask=k_mask, other=0.0).to(tl.float32)
            x = (x * rstd[:, None]).to(dtype).to(tl.float32)
            x = (x * norm_w[None, :]).to(dtype).to(tl.float32)
        w_mask = row_mask[:, None] & k_mask[None, :]
        w1 = tl.load(w1_rows + ks[None, :], mask=w_mask, other=0.0)
        if USE_DOT:
            acc1 = mma(x.to(dtype), tl.trans(w1), acc1, IEEE)
        else:
            acc1 += tl.sum(x[:, None, :] * w1.to(tl.float32)[None, :, :], axis=2)
        if PAIRED:
            w2 = tl.load(w2_rows + ks[None, :], mask=w_mask, other=0.0)
            if USE_DOT:
                acc2 = mma(x.to(dtype), tl.trans(w2), acc2, IEEE)
            else:
                acc2 += tl.sum(x[:, None, :] * w2.to(tl.float32)[None, :, :], axis=2)
    return acc1, acc2


@triton.jit
def _split_sum(acc1, acc2, part_ptr, count_ptr, PAIRED: tl.constexpr, SPLITS: tl.constexpr,
               BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """Split-K: every split stores its partial sums; the last split of a row block to arrive adds them up in split
    order (the same result whatever the arrival order), resets the block's counter for the next launch, and is the
    one whose epilogue stores (`last`). With one split: the sums as they are."""
    last = True
    if SPLITS > 1:
        pid = tl.program_id(0)
        split = tl.program_id(1)
        size = BLOCK_B * BLOCK_N
        tile = tl.arange(0, BLOCK_B)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        parts = part_ptr + pid.to(tl.int64) * SPLITS * 2 * size  # two slots a split (paired or not)
        tl.store(parts + split * 2 * size + tile, acc1)
        if PAIRED:
            tl.store(parts + (split * 2 + 1) * size + tile, acc2)
        tl.debug_barrier()  # every thread's partial is stored before the release below
        finished = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
        last = finished == SPLITS - 1
        if last:
            acc1 = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc2 = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            for part in range(SPLITS):
                acc1 += tl.load(parts + part * 2 * size + tile)
                if PAIRED:
                    acc2 += tl.load(parts + (part * 2 + 1) * size + tile)
            tl.store(count_ptr + pid, 0)
    return acc1, acc2, last


@triton.jit
def ks_gemv(x_ptr, w_ptr, b_ptr, res_ptr, out_ptr, B, N, K, stride_x, stride_w, stride_res, stride_out,
            part_ptr, count_ptr, K_SPLIT, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, USE_DOT: tl.constexpr,
            IEEE: tl.constexpr, SPLITS: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """out = x·wᵀ (+ bias), or residual + x·wᵀ rounded as HF's `residual + proj(x)`."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    pdl_prologue(PDL)
    acc, other = _gemv_tiles(x_ptr, stride_x, w_ptr, stride_w, rows, rows, row_mask, B, K, K_SPLIT, None, None,
                             False, False, USE_DOT, IEEE, SPLITS, BLOCK_B, BLOCK_N, BLOCK_K)
    acc, _, last = _split_sum(acc, other, part_ptr, count_ptr, False, SPLITS, BLOCK_B, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)[None, :]
    bs = tl.arange(0, BLOCK_B)
    mask = (bs[:, None] < B) & row_mask[None, :] & last
    dtype = out_ptr.dtype.element_ty
    if HAS_RESIDUAL:
        residual = tl.load(res_ptr + bs[:, None] * stride_res + rows[None, :], mask=mask).to(tl.float32)
        acc = acc.to(dtype).to(tl.float32) + residual
    tl.store(out_ptr + bs[:, None] * stride_out + rows[None, :], acc.to(dtype), mask=mask)


@triton.jit
def ks_gemv_head(h_ptr, norm_w_ptr, w_ptr, out_ptr, B, N, K, stride_h, stride_w, stride_out, eps,
                 part_ptr, count_ptr, K_SPLIT, USE_DOT: tl.constexpr, IEEE: tl.constexpr, SPLITS: tl.constexpr,
                 BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """out = rms_norm(h)·wᵀ: the final norm in front of the LM head."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    pdl_prologue(PDL)
    rstd = _row_rstd(h_ptr, stride_h, B, K, eps, BLOCK_B, BLOCK_K)
    acc, other = _gemv_tiles(h_ptr, stride_h, w_ptr, stride_w, rows, rows, row_mask, B, K, K_SPLIT, rstd,
                             norm_w_ptr, True, False, USE_DOT, IEEE, SPLITS, BLOCK_B, BLOCK_N, BLOCK_K)
    acc, _, last = _split_sum(acc, other, part_ptr, count_ptr, False, SPLITS, BLOCK_B, BLOCK_N)
    bs = tl.arange(0, BLOCK_B)
    tl.store(out_ptr + bs[:, None] * stride_out + rows[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(bs[:, None] < B) & row_mask[None, :] & last)


@triton.jit
def ks_gemv_gate_up(h_ptr, norm_w_ptr, w_ptr, out_ptr, B, F, K, stride_h, stride_w, stride_out, eps,
                    part_ptr, count_ptr, K_SPLIT, USE_DOT: tl.constexpr, IEEE: tl.constexpr, SPLITS: tl.constexpr,
                    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """out = silu(gate)·up with [gate; up] = rms_norm(h)·w_gate_upᵀ: rows n and F + n in one program."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < F
    pdl_prologue(PDL)
    rstd = _row_rstd(h_ptr, stride_h, B, K, eps, BLOCK_B, BLOCK_K)
    gate, up = _gemv_tiles(h_ptr, stride_h, w_ptr, stride_w, rows, rows + F, row_mask, B, K, K_SPLIT, rstd,
                           norm_w_ptr, True, True, USE_DOT, IEEE, SPLITS, BLOCK_B, BLOCK_N, BLOCK_K)
    gate, up, last = _split_sum(gate, up, part_ptr, count_ptr, True, SPLITS, BLOCK_B, BLOCK_N)
    dtype = out_ptr.dtype.element_ty
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    bs = tl.arange(0, BLOCK_B)
    tl.store(out_ptr + bs[:, None] * stride_out + rows[None, :], (act * up).to(dtype),
             mask=(bs[:, None] < B) & row_mask[None, :] & last)


@triton.jit
def ks_gemv_qkv(h_ptr, norm_w_ptr, w_ptr, b_ptr, pos_ptr, inv_freq_ptr, q_ptr, kc_ptr, vc_ptr,
                B, K, H, HKV, HALF, stride_h, stride_w, stride_cb, stride_cs, stride_ch, eps,
                part_ptr, count_ptr, K_SPLIT, HAS_BIAS: tl.constexpr, USE_DOT: tl.constexpr, IEEE: tl.constexpr, SPLITS: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """q, k, v = rms_norm(h)·w_qkvᵀ (+ bias); rope on q and k; q out, k and v into the caches at `positions`.

    A program owns BLOCK_N rotation pairs (row j and j + Dh/2 of one head), so rope needs nothing from others.
    """
    pairs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    head, j = pairs // HALF, pairs % HALF
    pair_mask = head < H + 2 * HKV
    rows1 = head * 2 * HALF + j
    pdl_prologue(PDL)
    rstd = _row_rstd(h_ptr, stride_h, B, K, eps, BLOCK_B, BLOCK_K)
    x1, x2 = _gemv_tiles(h_ptr, stride_h, w_ptr, stride_w, rows1, rows1 + HALF, pair_mask, B, K, K_SPLIT, rstd,
                         norm_w_ptr, True, True, USE_DOT, IEEE, SPLITS, BLOCK_B, BLOCK_N, BLOCK_K)
    x1, x2, last = _split_sum(x1, x2, part_ptr, count_ptr, True, SPLITS, BLOCK_B, BLOCK_N)
    if HAS_BIAS:
        x1 += tl.load(b_ptr + rows1, mask=pair_mask, other=0.0).to(tl.float32)[None, :]
        x2 += tl.load(b_ptr + rows1 + HALF, mask=pair_mask, other=0.0).to(tl.float32)[None, :]
    dtype = q_ptr.dtype.element_ty
    x1 = x1.to(dtype).to(tl.float32)
    x2 = x2.to(dtype).to(tl.float32)
    bs = tl.arange(0, BLOCK_B)
    b_mask = bs < B
    pos = tl.load(pos_ptr + bs, mask=b_mask, other=0)
    freq = pos[:, None].to(tl.float32) * tl.load(inv_freq_ptr + j, mask=pair_mask, other=0.0)[None, :]
    cos = tl.cos(freq).to(dtype).to(tl.float32)
    sin = tl.sin(freq).to(dtype).to(tl.float32)
    r1, r2 = rope_rotate(x1, x2, cos, sin, dtype)
    is_v = (head >= H + HKV)[None, :]
    out1 = tl.where(is_v, x1.to(dtype), r1)
    out2 = tl.where(is_v, x2.to(dtype), r2)
    mask = b_mask[:, None] & pair_mask[None, :] & last
    q_off = (bs[:, None] * H + head[None, :]) * 2 * HALF + j[None, :]
    q_mask = mask & (head < H)[None, :]
    tl.store(q_ptr + q_off, out1, mask=q_mask)
    tl.store(q_ptr + q_off + HALF, out2, mask=q_mask)
    kv_head = tl.where(head >= H + HKV, head - H - HKV, head - H)
    c_off = (bs[:, None].to(tl.int64) * stride_cb + pos[:, None].to(tl.int64) * stride_cs
             + kv_head[None, :] * stride_ch + j[None, :])
    k_mask = mask & ((head >= H) & (head < H + HKV))[None, :]
    v_mask = mask & is_v
    tl.store(kc_ptr + c_off, out1, mask=k_mask)
    tl.store(kc_ptr + c_off + HALF, out2, mask=k_mask)
    tl.store(vc_ptr + c_off, out1, mask=v_mask)
    tl.store(vc_ptr + c_off + HALF, out2, mask=v_mask)
