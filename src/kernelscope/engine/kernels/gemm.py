"""Prefill linear layers: a tiled tensor-core GEMM, out[M,N] = x[M,K]·w[N,K]ᵀ (+ bias), fp32 accumulation.

When the output has fewer tiles than the device has SMs (short prompts: 128 tokens make 12–16 tiles of the
attention and down projections), K is split too: each split writes an fp32 partial tile and the last split of a
tile to finish sums all partials in split order (deterministic), adds the bias and writes the output.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from .common import exact_dot, launch_counters, mma


@triton.jit
def ks_gemm(x_ptr, w_ptr, b_ptr, out_ptr, part_ptr, count_ptr, M, N, K, K_SPLIT, stride_x, stride_w, stride_out,
            HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, GROUP_M: tl.constexpr, SPLITS: tl.constexpr,
            SWIGLU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """SWIGLU: w holds [gate; up] (2N rows); a program multiplies its gate rows and the matching up rows
    (N further) and writes silu(gate)·up [M, N], rounded where HF's act_fn(gate) * up rounds (no bias, no split)."""
    # Grouped tile order: neighbouring programs share weight tiles in L2.
    pid = tl.program_id(0)
    split = tl.program_id(1)
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
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    up_ptr = w_ptr + N * stride_w
    k_end = tl.minimum((split + 1) * K_SPLIT, K)
    for start in range(split * K_SPLIT, k_end, BLOCK_K):
        k_mask = (start + ks) < k_end
        x = tl.load(x_ptr + start + x_offs, mask=(rows[:, None] < M) & k_mask[None, :], other=0.0)
        w_mask = (cols[None, :] < N) & k_mask[:, None]
        w = tl.load(w_ptr + start + w_offs, mask=w_mask, other=0.0)
        acc = mma(x, w, acc, IEEE)
        if SWIGLU:
            acc_up = mma(x, tl.load(up_ptr + start + w_offs, mask=w_mask, other=0.0), acc_up, IEEE)
    out_mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SWIGLU:
        dtype = out_ptr.dtype.element_ty
        gate = acc.to(dtype).to(tl.float32)
        up = acc_up.to(dtype).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        out = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
        tl.store(out, (act * up).to(dtype), mask=out_mask)
    elif SPLITS > 1:
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tile_parts = part_ptr + pid.to(tl.int64) * SPLITS * BLOCK_M * BLOCK_N
        tl.store(tile_parts + split * BLOCK_M * BLOCK_N + tile_offs, acc)
        tl.debug_barrier()  # every thread's partial is stored before the release below
        finished = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if finished == SPLITS - 1:
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for part in range(SPLITS):
                acc += tl.load(tile_parts + part * BLOCK_M * BLOCK_N + tile_offs)
            if HAS_BIAS:
                acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
            out = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
            tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.store(count_ptr + pid, 0)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        out = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def _config(m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by shape, from H100 sweeps at qwen2-1.5b shapes
    (benchmarks/engine/gemm_sweep.py; results/engine-limits-h100-2026-11-25): up to 256 rows narrow tiles (at
    128 tokens the q/k/v and o projections take 64 × 32 tiles with long K steps, the long-K down projection a
    six-stage pipeline: 1.1–1.9x faster than 128 × 128), 128 × 128 beyond."""
    if m <= 256:
        if k >= 4096:
            return 64, 64, 64, 4, 6
        if n <= 4096:
            return 64, 32, 128, 4, 4
        return 64, 64, 64, 4, 4
    return 128, 128, 64, 8, 3


def _swiglu_config(m: int) -> tuple[int, int, int, int, int]:
    """The fused gate/up + SwiGLU GEMM (two accumulators): 64 × 64 up to 256 rows, 128 × 128 beyond (the sweep's
    best at 128 and 2048 tokens)."""
    if m <= 256:
        return 64, 64, 64, 4, 4
    return 128, 128, 64, 8, 3


_SPLIT_MIN_K_TILES = 4  # a split streams at least this many BLOCK_K tiles
_MAX_SPLITS = 16
_INTERPRETER_SMS = 132  # no device to ask: an H100's count, so that the CPU tests take the split path too


@functools.cache
def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return _INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def gemm_splits(m: int, n: int, k: int, sms: int) -> tuple[int, int]:
    """(splits of K, K per split) so that tiles × splits about fill the SMs; 1 split when the tiles do."""
    block_m, block_n, block_k, _, _ = _config(m, n, k)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    splits = 1
    if tiles < sms:
        splits = max(1, min(triton.cdiv(sms, tiles), k // (_SPLIT_MIN_K_TILES * block_k), _MAX_SPLITS))
    k_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    return triton.cdiv(k, k_split), k_split


def gemm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    (m, k), n = x.shape, w.shape[0]
    block_m, block_n, block_k, warps, stages = _config(m, n, k)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    splits, k_split = gemm_splits(m, n, k, sm_count(x.device))
    if splits > 1:
        parts = torch.empty(tiles * splits * block_m * block_n, dtype=torch.float32, device=x.device)
        counters = launch_counters("gemm", x.device, tiles)
    else:
        parts = counters = out  # not read
    ks_gemm[(tiles, splits)](x, w, bias if bias is not None else w, out, parts, counters, m, n, k, k_split,
                             x.stride(0), w.stride(0), out.stride(0), HAS_BIAS=bias is not None,
                             IEEE=exact_dot(x.dtype), GROUP_M=8, SPLITS=splits, SWIGLU=False, BLOCK_M=block_m,
                             BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)


def gemm_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """out[M, F] = silu(x·gateᵀ)·(x·upᵀ), w_gate_up = [gate; up] of 2F rows; one launch, no split."""
    (m, k), ffn = x.shape, w_gate_up.shape[0] // 2
    block_m, block_n, block_k, warps, stages = _swiglu_config(m)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(ffn, block_n)
    ks_gemm[(tiles, 1)](x, w_gate_up, w_gate_up, out, out, out, m, ffn, k, k, x.stride(0), w_gate_up.stride(0),
                        out.stride(0), HAS_BIAS=False, IEEE=exact_dot(x.dtype), GROUP_M=8, SPLITS=1, SWIGLU=True,
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)


def gemm_partial_bytes(m: int, n: int, k: int, device: torch.device) -> int:
    """fp32 partial tiles a split GEMM writes and reads back (0 without a split), for the declared cost."""
    block_m, block_n, _, _, _ = _config(m, n, k)
    splits, _ = gemm_splits(m, n, k, sm_count(device))
    if splits == 1:
        return 0
    return 2 * triton.cdiv(m, block_m) * triton.cdiv(n, block_n) * splits * block_m * block_n * 4
