"""Launchers of the linear layers: GEMM for prefill, GEMV for ≤ 8 tokens, and the fused decode GEMVs.

Block sizes come from a small table by shape (no autotuning at run time: decode runs inside CUDA graphs).
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import torch
import triton

from kernelscope.engine_costs import declare

from .. import reference
from ..errors import EngineError
from .common import VECTOR, exact_dot, launch_counters, matrix_precision, new_or, pdl_options, pow2
from .elementwise import add, swiglu
from .gemm import gemm, gemm_partial_bytes, gemm_swiglu, sm_count
from .gemv import ks_gemv, ks_gemv_gate_up, ks_gemv_head, ks_gemv_qkv
from .norm import rms_norm

MAX_GEMV_TOKENS = 8


# The kinds of decode GEMV: the kernel and its fused prologue/epilogue, which the tile and split rules below go by.
# "linear": ks_gemv (+ bias); "residual": ks_gemv + residual add (o_proj, down); "head": ks_gemv_head (final norm
# + LM head); "gate_up": ks_gemv_gate_up (norm, paired gate/up rows, SwiGLU); "qkv": ks_gemv_qkv (norm, paired
# rotation rows, bias, RoPE and the KV-cache write).
GEMV_KINDS = ("linear", "residual", "head", "gate_up", "qkv")
PAIRED_KINDS = ("gate_up", "qkv")  # programs stream two weight rows per program row


class GemvPlan(NamedTuple):
    """How a decode GEMV launches: tiles (BLOCK_N rows per program, BLOCK_K, warps, stages, tensor cores) and
    split-K (splits, K per split: a multiple of BLOCK_K)."""

    block_n: int
    block_k: int
    warps: int
    stages: int
    dot: bool
    splits: int
    k_split: int


def gemv_tiles(kind: str, batch: int, rows: int, k: int, splits: int) -> tuple[int, int, int, int, bool]:
    """(BLOCK_N, BLOCK_K, num_warps, num_stages, tensor cores) for a `kind` GEMV of `batch` tokens over `rows`
    program rows, split `splits` ways along K.

    One token: long K tiles (2048) and 1–4 rows per program on the CUDA cores, the fastest of a sweep on an H100
    at qwen2-1.5b shapes (benchmarks/engine/ops_check.py --sweep; results/engine-decode-h100-2026-11-22): gate/up
    went from 66% to 82% of copy bandwidth, lm_head from 95% to 104% (L2 helps), down stayed at 70%. 2–8 tokens
    run on the tensor cores (BLOCK_N ≥ 16) with a deeper software pipeline instead. Register use is checked by
    tests/unit/engine/test_ops_compile.py. (The one-token loop is not software-pipelined: num_stages does not
    matter there. Loading each weight tile one iteration ahead in registers was slower in 40 of 50 tiles at
    llama-3-8b and in both decode steps tried, 5.717 → 6.290 ms: results/engine-llama-b1-h100-2026-11-26.)

    One token at llama-3-8b shapes (K 4,096; benchmarks/engine/gemv_b1_sweep.py,
    results/engine-llama-b1-h100-2026-11-26, back-to-back launches from a CUDA graph, copy 2,945 GB/s), two changes to the rule above:
    - a K of 2,049–4,096 streams each row as one 4,096-wide tile, with half the rows per program (the tile stays
      at ≤ 8,192 elements for 4 warps' registers): gate/up 80.6 → 78.2 µs (99% → 102% of copy), lm_head 337.2 →
      331.2 µs, o_proj 14.75 → 14.44 µs. K ≤ 2,048 (qwen2-1.5b) and longer K are unchanged: down (K 14,336) ran
      42.9 µs with 2,048-wide tiles and 45.1–47.0 µs with 4,096-wide ones (its last tile half masked).
    - q/k/v (paired rows, norm prologue and RoPE epilogue a program) takes 4 pairs per program from 2,048 pairs
      (768 programs at llama-3-8b's 3,072 pairs) and keeps 2,048-wide tiles: 24.43 → 22.75 µs (70% → 75%);
      4,096-wide tiles with 2 pairs took 23.46 µs. At qwen2-1.5b (1,024 pairs) 1 pair per program stays the
      fastest (5.93 µs; 2 pairs 6.15, 4 pairs 6.20).
    llama-3-8b batch-1 decode, side by side with the rule before: 5.770 → 5.597 ms; qwen2-1.5b's plans (K 1,536,
    down 8,960, 1,024 q/k/v pairs) are unchanged.

    The 32-row tiles (4,096 < rows ≤ 16,384) take BLOCK_K 128, 8 warps and 3 stages: the fastest of a sweep of
    BLOCK_K 128/256 × 4/8 warps × 2–4 stages on an H100 (benchmarks/engine/gemv_split_sweep.py --tiles;
    results/engine-tiles-h100-2026-11-26), where the fused gate/up of qwen2-1.5b (8,960 pairs of rows) went from
    31.3 to 25.2 µs at batch 8 (59% → 74% of copy bandwidth; 15% and 19% less time at batches 2 and 4). Compiled for
    sm_90, that gate/up program (2 × 32 weight rows) takes 133 KB of shared memory with 256-wide tiles in 4 stages,
    so one fits an SM and its 280 programs run in three waves; with 128 × 3 stages it takes 46 KB.

    The 16-row tiles (rows ≤ 4,096) go by kind, from the same sweep at batch 8 (batches 2 and 4 alike):
    - q/k/v (paired, two 16-row weight tiles a program) takes 128 × 8 warps × 3 stages, split four ways by the
      rule below: 11.94 → 11.21 µs. The same tiles with 4 warps ran 12.6–12.8 µs, and 256 × 8 warps 18.7+ µs.
    - residual, split: 128 × 4 warps × 4 stages (down of qwen2-1.5b, six splits of 1,536: 15.06 → 14.04 µs; six
      splits of 256-wide tiles took 15.89 µs, so the narrower tile goes with the split; 8 warps: 19.5+ µs).
    - the rest, and residual unsplit (o_proj of qwen2-1.5b: 5.77 µs, the fastest cell; 128-wide 6.0 µs), keep
      256 × 4 warps × 4 stages.
    """
    if batch == 1:
        block_n = 1 if rows <= 1024 else 2 if rows < 4096 else 4
        block_k = max(16, min(2048, pow2(k)))
        if kind == "qkv":
            if rows >= 2048:
                block_n = 4
        elif block_k == 2048 and pow2(k) == 4096:
            block_n, block_k = max(1, block_n // 2), 4096
        return block_n, block_k, 4, 3, False
    if 4096 < rows <= 16384:
        return 32, max(16, min(128, pow2(k))), 8, 3, True
    if rows <= 4096 and kind == "qkv":
        return 16, max(16, min(128, pow2(k))), 8, 3, True
    if rows <= 4096 and kind == "residual" and splits > 1:
        return 16, max(16, min(128, pow2(k))), 4, 4, True
    return 16 if rows <= 4096 else 64, max(16, min(256, pow2(k))), 4, 4, True


# Split-K for the tensor-core GEMVs (2–8 tokens): a GEMV of few row blocks splits K until it has about `target`
# programs per SM, each split streaming at least `min_k` elements of K; kind → (target, min_k). One token keeps one
# split (its CUDA-core tiles of 1–4 rows already give hundreds of programs). From the sweeps on an H100 at
# qwen2-1.5b shapes (benchmarks/engine/gemv_split_sweep.py; results/engine-gemv-split-h100-2026-11-26 and
# results/engine-tiles-h100-2026-11-26, batch 8):
# - residual (4, 1024): down (96 row blocks, K = 8,960) split six ways (1,536 each) took 14.04 µs against 15.06
#   split three ways (target 2) and 18.9 unsplit; o_proj (K = 1,536) ran slower in every split tried (3 × 512:
#   6.2–6.5 µs, 6 × 256: 6.3–7.0, against 5.77 unsplit), so a split needs K ≥ 2,048 here. Splits of 513–1,023
#   were not measured: the line is drawn between what was.
# - qkv (2, 384): 64 programs of paired rows split four ways (384 each) 11.21 µs against 11.94 unsplit; six splits
#   of 256 took 16.5–17.2 µs, so no split is shorter than three 128-wide tiles.
# - gate_up, head, linear (2, 1024): gate/up's 280 programs already exceed 2 a SM; split two ways (768 each,
#   target 4) it ran slower at every tile tried (29.9 against 25.2 µs). 1,024 is the old minimum of four 256-wide
#   tiles.
# Checked op by op against the previous rule (results/engine-splits-h100-2026-11-26, gemv_plan_compare.py, batch 8):
# qwen2-1.5b q/k/v 12.09 → 11.35 µs, down 15.79 → 14.60, o_proj and gate/up the same plan; at llama-3-8b (o_proj and
# down 2 → 3 splits on 128-wide tiles, q/k/v 8 warps) and qwen2-0.5b shapes no op whose plan changed got slower.
# Batch-8 decode side by side: 2.042 → 1.989 ms.
# KERNELSCOPE_ENGINE_GEMV_SPLIT_TARGET sets every kind's target; 0 turns splitting off.
GEMV_SPLIT_RULES: dict[str, tuple[float, int]] = {
    "linear": (2.0, 1024), "residual": (4.0, 1024), "head": (2.0, 1024), "gate_up": (2.0, 1024), "qkv": (2.0, 384)}
if "KERNELSCOPE_ENGINE_GEMV_SPLIT_TARGET" in os.environ:
    _target = float(os.environ["KERNELSCOPE_ENGINE_GEMV_SPLIT_TARGET"])
    GEMV_SPLIT_RULES = {kind: (_target, min_k) for kind, (_, min_k) in GEMV_SPLIT_RULES.items()}
GEMV_MAX_SPLITS = 8


def gemv_plan(kind: str, batch: int, rows: int, k: int, sms: int) -> GemvPlan:
    """Tiles and split-K of a `kind` GEMV (GEMV_KINDS) of `batch` tokens over `rows` program rows (pairs for the
    paired kinds) and a K of `k`, on a device of `sms` SMs."""
    if kind not in GEMV_KINDS:
        raise EngineError(f"unknown GEMV kind {kind!r}")
    block_n = gemv_tiles(kind, batch, rows, k, 1)[0]  # BLOCK_N does not depend on the split
    programs = triton.cdiv(rows, block_n)
    target, min_k = GEMV_SPLIT_RULES[kind]
    splits = 1
    if batch > 1 and target > 0 and programs < target * sms:
        splits = max(1, min(math.ceil(target * sms / programs), k // min_k, GEMV_MAX_SPLITS))
    block_n, block_k, warps, stages, dot = gemv_tiles(kind, batch, rows, k, splits)
    k_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    return GemvPlan(block_n, block_k, warps, stages, dot, triton.cdiv(k, k_split), k_split)


def gemv_meta(plan: GemvPlan, batch: int, dtype: torch.dtype) -> dict:
    """The constexprs and launch options of a GEMV kernel (shared with the compile test)."""
    # Tensor cores pad the tokens to 16 rows; the CUDA cores take them as they are (a power of two).
    return {"USE_DOT": plan.dot, "IEEE": exact_dot(dtype), "BLOCK_B": 16 if plan.dot else pow2(batch),
            "BLOCK_N": plan.block_n, "BLOCK_K": plan.block_k, "num_warps": plan.warps, "num_stages": plan.stages}


def _precision(batch: int, dtype: torch.dtype) -> str:
    """The roof a GEMV runs against: the tensor cores' for its dtype at 2–8 tokens, fp32 on the CUDA cores for
    one."""
    return matrix_precision(dtype) if batch > 1 else VECTOR


def gemv_partial_bytes(kind: str, batch: int, rows: int, k: int, device: torch.device) -> int:
    """fp32 partial sums a split GEMV writes and its last split reads back (0 without a split), for the declared
    cost: 16 padded tokens × BLOCK_N rows a program and split, twice for the paired kinds."""
    plan = gemv_plan(kind, batch, rows, k, sm_count(device))
    if plan.splits == 1:
        return 0
    paired = 2 if kind in PAIRED_KINDS else 1
    return 2 * triton.cdiv(rows, plan.block_n) * plan.splits * paired * 16 * plan.block_n * 4


def _launch_gemv(kernel, kind: str, rows: int, batch: int, k: int, *args, **consts) -> None:
    device = args[0].device
    plan = gemv_plan(kind, batch, rows, k, sm_count(device))
    meta = gemv_meta(plan, batch, args[0].dtype)
    programs = triton.cdiv(rows, plan.block_n)
    if plan.splits > 1:
        parts = torch.empty(programs * plan.splits * 2 * meta["BLOCK_B"] * meta["BLOCK_N"], dtype=torch.float32,
                            device=device)
        counters = launch_counters("gemv", device, programs)
    else:
        parts = counters = args[0]  # not read
    kernel[(programs, plan.splits)](*args, part_ptr=parts, count_ptr=counters, K_SPLIT=plan.k_split,
                                    SPLITS=plan.splits, **consts, **meta, **pdl_options(device))


def _dense_cost(tokens: int, n: int, k: int, es: int, bias: bool) -> tuple[int, int]:
    flops = 2 * tokens * n * k + (tokens * n if bias else 0)
    return flops, (tokens * k + n * k + tokens * n + (n if bias else 0)) * es


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    (tokens, k), n = x.shape, w.shape[0]
    out = new_or(out, (tokens, n), x)
    flops, nbytes = _dense_cost(tokens, n, k, x.element_size(), bias is not None)
    if tokens > MAX_GEMV_TOKENS:
        nbytes += gemm_partial_bytes(tokens, n, k, x.device)
        with declare("ks_gemm", flops, nbytes, matrix_precision(x.dtype)):
            gemm(x, w, bias, out)
        return out
    nbytes += gemv_partial_bytes("linear", tokens, n, k, x.device)
    with declare("ks_gemv", flops, nbytes, _precision(tokens, x.dtype)):
        _launch_gemv(ks_gemv, "linear", n, tokens, k, x, w, bias if bias is not None else w, x, out, tokens, n, k,
                     x.stride(0), w.stride(0), 0, out.stride(0), HAS_BIAS=bias is not None, HAS_RESIDUAL=False)
    return out


def gate_up_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x·gateᵀ)·(x·upᵀ): one fused GEMM for prefill; the GEMV and swiglu kernels for ≤ 8 tokens."""
    x = _rows(x)
    (tokens, k), ffn = x.shape, w_gate_up.shape[0] // 2
    if tokens <= MAX_GEMV_TOKENS:
        return swiglu(linear(x, w_gate_up), out=out)
    out = new_or(out, (tokens, ffn), x)
    flops = 2 * tokens * 2 * ffn * k + 5 * tokens * ffn
    nbytes = (tokens * k + 2 * ffn * k + tokens * ffn) * x.element_size()
    with declare("ks_gemm_swiglu", flops, nbytes, matrix_precision(x.dtype)):
        gemm_swiglu(x, w_gate_up, out)
    return out


def linear_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    (batch, k), n = x.shape, w.shape[0]
    if batch > MAX_GEMV_TOKENS:
        return add(linear(x, w), residual, out=out)
    x = _rows(x)
    out = new_or(out, (batch, n), x)
    flops, nbytes = _dense_cost(batch, n, k, x.element_size(), False)
    nbytes += batch * n * x.element_size() + gemv_partial_bytes("residual", batch, n, k, x.device)
    with declare("ks_gemv_residual", flops + batch * n, nbytes, _precision(batch, x.dtype)):
        _launch_gemv(ks_gemv, "residual", n, batch, k, x, w, w, residual, out, batch, n, k,
                     x.stride(0), w.stride(0), residual.stride(0), out.stride(0),
                     HAS_BIAS=False, HAS_RESIDUAL=True)
    return out


def _rows(x: torch.Tensor) -> torch.Tensor:
    """The GEMV kernels read rows with unit stride along K."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _norm_cost(batch: int, k: int, es: int) -> tuple[int, int]:
    """RMSNorm prologue: 4 flops per input element; reads the input rows and the norm weight."""
    return 4 * batch * k, (batch * k + k) * es


def norm_linear(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w: torch.Tensor,
                out: torch.Tensor | None = None) -> torch.Tensor:
    (batch, k), n = h.shape, w.shape[0]
    if batch > MAX_GEMV_TOKENS:
        return linear(rms_norm(h, norm_w, eps), w, out=out)
    h = _rows(h)
    out = new_or(out, (batch, n), h)
    es = h.element_size()
    norm_flops, norm_bytes = _norm_cost(batch, k, es)
    nbytes = norm_bytes + (n * k + batch * n) * es + gemv_partial_bytes("head", batch, n, k, h.device)
    with declare("ks_gemv_head", norm_flops + 2 * batch * n * k, nbytes, _precision(batch, h.dtype)):
        _launch_gemv(ks_gemv_head, "head", n, batch, k, h, norm_w, w, out, batch, n, k, h.stride(0), w.stride(0),
                     out.stride(0), eps)
    return out


def norm_gate_up_swiglu(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_gate_up: torch.Tensor,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    (batch, k), ffn = h.shape, w_gate_up.shape[0] // 2
    if batch > MAX_GEMV_TOKENS:
        return swiglu(linear(rms_norm(h, norm_w, eps), w_gate_up), out=out)
    h = _rows(h)
    out = new_or(out, (batch, ffn), h)
    es = h.element_size()
    norm_flops, norm_bytes = _norm_cost(batch, k, es)
    flops = norm_flops + 2 * batch * 2 * ffn * k + 5 * batch * ffn
    nbytes = norm_bytes + (2 * ffn * k + batch * ffn) * es + gemv_partial_bytes("gate_up", batch, ffn, k, h.device)
    with declare("ks_gemv_gate_up", flops, nbytes, _precision(batch, h.dtype)):
        _launch_gemv(ks_gemv_gate_up, "gate_up", ffn, batch, k, h, norm_w, w_gate_up, out, batch, ffn, k,
                     h.stride(0), w_gate_up.stride(0), out.stride(0), eps)
    return out


def norm_qkv_rope_cache(h: torch.Tensor, norm_w: torch.Tensor, eps: float, w_qkv: torch.Tensor,
                        b_qkv: torch.Tensor | None, positions: torch.Tensor, inv_freq: torch.Tensor,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int, num_kv_heads: int,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    batch, k = h.shape
    head_dim = k_cache.shape[-1]
    if batch > MAX_GEMV_TOKENS:
        return reference.norm_qkv_rope_cache(h, norm_w, eps, w_qkv, b_qkv, positions, inv_freq, k_cache,
                                             v_cache, num_heads, num_kv_heads, out=out)
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise EngineError("the K and V caches need the same layout with a contiguous head dim")
    h = _rows(h)
    q = new_or(out, (batch, num_heads, head_dim), h)
    n = w_qkv.shape[0]
    es = h.element_size()
    norm_flops, norm_bytes = _norm_cost(batch, k, es)
    rope_elements = batch * (num_heads + num_kv_heads) * head_dim
    flops = norm_flops + 2 * batch * n * k + (batch * n if b_qkv is not None else 0) + 3 * rope_elements
    nbytes = (norm_bytes + (n * k + (n if b_qkv is not None else 0) + batch * n) * es
              + batch * positions.element_size() + inv_freq.numel() * 4
              + gemv_partial_bytes("qkv", batch, n // 2, k, h.device))
    with declare("ks_gemv_qkv", flops, nbytes, _precision(batch, h.dtype)):
        _launch_gemv(ks_gemv_qkv, "qkv", n // 2, batch, k, h, norm_w, w_qkv, b_qkv if b_qkv is not None else w_qkv,
                     positions, inv_freq, q, k_cache, v_cache, batch, k, num_heads, num_kv_heads, head_dim // 2,
                     h.stride(0), w_qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), eps,
                     HAS_BIAS=b_qkv is not None)
    return q
