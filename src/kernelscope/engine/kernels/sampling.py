"""Greedy argmax and filtered sampling over the vocabulary (one row per program, looping over V).

Sampling is an exponential race: with noise q ~ Exp(1) drawn by torch, argmax(p / q) is a draw from p. The
top-k and top-p thresholds are found exactly, without sorting, by bisection over the bit patterns of the
fp32 values (order-preserving integer keys), each step one counting pass over the row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelscope.engine_costs import declare

from .. import reference
from .common import VECTOR, launch_counters, pdl_options, pdl_prologue, pow2

_BLOCK_V = 8192
_WARPS = 16  # one program streams a whole row: wide steps keep many loads in flight


@triton.jit
def ks_argmax(logits_ptr, out_ptr, part_val_ptr, part_idx_ptr, count_ptr, V, stride_row, CHUNK, PARTS,
              BLOCK_V: tl.constexpr, BLOCK_P: tl.constexpr, PDL: tl.constexpr):
    """First index of each row's maximum. Program (row, part) scans CHUNK columns and writes its best (value,
    index); the last part of a row to finish (counter, acq_rel) picks among them: the largest value, and among
    equal values the lowest index (parts are in column order), so the result is the first maximum overall."""
    pdl_prologue(PDL)
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    best = tl.full((), float("-inf"), tl.float32)
    first = part * CHUNK
    last = tl.minimum(first + CHUNK, V)
    best_idx = first.to(tl.int64)
    for start in range(first, last, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(logits_ptr + row * stride_row + cols, mask=cols < last, other=float("-inf")).to(tl.float32)
        block_max = tl.max(x, axis=0)
        # First index of the block maximum; a later block wins only when strictly larger (first max overall).
        block_idx = tl.min(tl.where(x == block_max, cols, V), axis=0).to(tl.int64)
        better = block_max > best
        best_idx = tl.where(better, block_idx, best_idx)
        best = tl.where(better, block_max, best)
    slot = row * PARTS + part
    tl.store(part_val_ptr + slot, best)
    tl.store(part_idx_ptr + slot, best_idx)
    tl.debug_barrier()
    finished = tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu")
    if finished == PARTS - 1:
        ps = tl.arange(0, BLOCK_P)
        values = tl.load(part_val_ptr + row * PARTS + ps, mask=ps < PARTS, other=float("-inf"))
        indices = tl.load(part_idx_ptr + row * PARTS + ps, mask=ps < PARTS, other=V)
        top = tl.max(values, axis=0)
        tl.store(out_ptr + row, tl.min(tl.where((values == top) & (ps < PARTS), indices, V), axis=0))
        tl.store(count_ptr + row, 0)


_ARGMAX_BLOCK = 2048
_ARGMAX_MAX_PARTS = 128


def argmax(logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    rows, vocab = logits.shape
    out = out if out is not None else torch.empty(rows, dtype=torch.int64, device=logits.device)
    # Enough parts of whole blocks to spread one row over many SMs; the combine reads at most 128 partials.
    parts = min(triton.cdiv(vocab, _ARGMAX_BLOCK), _ARGMAX_MAX_PARTS)
    chunk = triton.cdiv(triton.cdiv(vocab, parts), _ARGMAX_BLOCK) * _ARGMAX_BLOCK
    parts = triton.cdiv(vocab, chunk)
    part_val = torch.empty(rows * parts, dtype=torch.float32, device=logits.device)
    part_idx = torch.empty(rows * parts, dtype=torch.int64, device=logits.device)
    counters = launch_counters("argmax", logits.device, rows)
    nbytes = rows * (vocab * logits.element_size() + 8) + 2 * rows * parts * 12
    with declare("ks_argmax", rows * vocab, nbytes, VECTOR):
        ks_argmax[(rows, parts)](logits, out, part_val, part_idx, counters, vocab, logits.stride(0), chunk, parts,
                                 BLOCK_V=_ARGMAX_BLOCK, BLOCK_P=pow2(parts), num_warps=4,
                                 **pdl_options(logits.device))
    return out


@triton.jit
def _ordered_key(x):
    """fp32 → int32 whose signed order is the float order (flip the magnitude bits of negatives)."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _load_scaled(row_ptr, cols, V, temperature):
    """logits / temperature in fp32 (IEEE division, as torch), -inf past the row's end."""
    x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    return tl.math.div_rn(x, temperature)


@triton.jit
def _count_at_least(row_ptr, V, key, temperature, BLOCK_V: tl.constexpr):
    total = tl.full((), 0, tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = _load_scaled(row_ptr, cols, V, temperature)
        total += tl.sum(((_ordered_key(x) >= key) & (cols < V)).to(tl.int32), axis=0)
    return total


@triton.jit
def _mass_above(row_ptr, V, bits, floor_key, row_max, temperature, inv_sum, BLOCK_V: tl.constexpr):
    """Probability mass of the kept (key ≥ floor_key) tokens whose probability's bits are > `bits`."""
    total = tl.full((), 0.0, tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = _load_scaled(row_ptr, cols, V, temperature)
        p = tl.where(_ordered_key(x) >= floor_key, tl.exp(x - row_max) * inv_sum, 0.0)
        total += tl.sum(tl.where(p.to(tl.int32, bitcast=True) > bits, p, 0.0), axis=0)
    return total


@triton.jit
def ks_sample(logits_ptr, noise_ptr, out_ptr, V, stride_row, temperature, top_k, top_p,
              USE_TOP_K: tl.constexpr, USE_TOP_P: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    # Top-k: the largest key with at least k logits at or above it is the k-th largest logit.
    floor_key = tl.full((), -2147483648, tl.int32)
    if USE_TOP_K:
        lo = tl.full((), -2147483648, tl.int64)
        hi = tl.full((), 2147483647, tl.int64)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _count_at_least(row_ptr, V, mid.to(tl.int32), temperature, BLOCK_V) >= top_k:
                lo = mid
            else:
                hi = mid - 1
        floor_key = lo.to(tl.int32)
    # Softmax statistics over the kept logits (online max and sum).
    row_max = tl.full((), float("-inf"), tl.float32)
    row_sum = tl.full((), 0.0, tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = _load_scaled(row_ptr, cols, V, temperature)
        x = tl.where(_ordered_key(x) >= floor_key, x, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(x, axis=0))
        row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        row_max = new_max
    inv_sum = 1.0 / row_sum
    # Top-p: the smallest probability p* whose strictly-larger mass is < top_p; keep every p ≥ p*.
    p_floor = tl.full((), 0, tl.int32)
    if USE_TOP_P:
        lo_p = tl.full((), 0, tl.int32)
        hi_p = tl.full((), 0x3F800000, tl.int32)  # bits of 1.0
        while lo_p < hi_p:
            mid_p = lo_p + (hi_p - lo_p) // 2
            if _mass_above(row_ptr, V, mid_p, floor_key, row_max, temperature, inv_sum, BLOCK_V) < top_p:
                hi_p = mid_p
            else:
                lo_p = mid_p + 1
        p_floor = lo_p
    # The race: argmax of p / noise over the kept tokens.
    best = tl.full((), -1.0, tl.float32)
    best_idx = tl.full((), 0, tl.int64)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = _load_scaled(row_ptr, cols, V, temperature)
        p = tl.where(_ordered_key(x) >= floor_key, tl.exp(x - row_max) * inv_sum, 0.0)
        p = tl.where(p.to(tl.int32, bitcast=True) >= p_floor, p, 0.0)
        q = tl.load(noise_ptr + row * V + cols, mask=cols < V, other=1.0)
        score = tl.where(cols < V, tl.math.div_rn(p, q), -1.0)
        block_best = tl.max(score, axis=0)
        block_idx = tl.min(tl.where(score == block_best, cols, V), axis=0).to(tl.int64)
        better = block_best > best
        best_idx = tl.where(better, block_idx, best_idx)
        best = tl.where(better, block_best, best)
    tl.store(out_ptr + row, best_idx)


def sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
           generator: torch.Generator | None = None) -> torch.Tensor:
    if temperature == 0.0:
        return argmax(logits)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    rows, vocab = logits.shape
    use_top_k, use_top_p = 0 < top_k < vocab, top_p < 1.0
    noise = reference.sampling_noise(logits, generator)
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    # Passes over the row: 32 counting passes for top-k, 30 mass passes for top-p, softmax, the race.
    passes = 2 + 32 * use_top_k + 30 * use_top_p
    nbytes = rows * (vocab * (logits.element_size() + 4) + 8)
    with declare("ks_sample", passes * 4 * rows * vocab, nbytes, VECTOR):
        ks_sample[(rows,)](logits, noise, out, vocab, logits.stride(0), float(temperature), top_k, top_p,
                           USE_TOP_K=use_top_k, USE_TOP_P=use_top_p, BLOCK_V=_BLOCK_V, num_warps=_WARPS)
    return out
