"""The fused decode operators (under TRITON_INTERPRET=1 on CPU) against the PyTorch reference: q/k/v with RoPE and
the cache write, norm + q/k/v, the fused and one-token decode GEMVs, their split-K forms, and the GEMV plans at model
shapes. Tolerances as in test_ops.py (op_checks.py)."""

from __future__ import annotations

import pytest
import torch

from kernelscope.engine import reference as ref
from tests.unit.engine import op_checks
from tests.unit.engine.op_checks import DTYPES, EPS, close, inv_freq, rand

_seed = op_checks._seed  # torch seeded before every test: an autouse fixture



@pytest.mark.parametrize("dtype", DTYPES)
def test_qkv_rope_cache(triton_ops, dtype):
    """Prefill's split: q roped out, k roped and v copied into the caches' first L slots (the rest untouched)."""
    batch, length, heads, kv_heads, head_dim, slots = 2, 5, 6, 2, 16, 12  # 10 heads: a masked block of 16
    qkv = rand(batch, length, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
    positions = torch.arange(length).repeat(batch)
    caches = [rand(batch, slots, kv_heads, head_dim, dtype=dtype) for _ in range(2)]
    want_caches = [c.clone() for c in caches]
    got = triton_ops.qkv_rope_cache(qkv, positions, inv_freq(head_dim), *caches, heads, kv_heads)
    want = ref.qkv_rope_cache(qkv, positions, inv_freq(head_dim), *want_caches, heads, kv_heads)
    assert got.shape == (batch, length, heads, head_dim)
    close(got, want, dtype)
    close(caches[0], want_caches[0], dtype)
    assert torch.equal(caches[1], want_caches[1])  # v is copied, not computed
    # The values: v's cache rows are the last kv_heads·head_dim columns of qkv, the slots past L unchanged.
    v_columns = qkv[..., (heads + kv_heads) * head_dim:].reshape(batch, length, kv_heads, head_dim)
    assert torch.equal(caches[1][:, :length], v_columns)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_cache_write(triton_ops, dtype):
    k_new = rand(3, 5, 4, 8, dtype=dtype)[:, :, :2]  # strided heads → made contiguous
    v_new = rand(3, 5, 2, 8, dtype=dtype)
    caches = [rand(3, 20, 2, 8, dtype=dtype) for _ in range(2)]
    want = [c.clone() for c in caches]
    triton_ops.kv_cache_write(k_new, v_new, *caches, 11)
    ref.kv_cache_write(k_new, v_new, *want, 11)
    assert torch.equal(caches[0], want[0]) and torch.equal(caches[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "group", "bias"), [(1, 1, True), (3, 4, False)])
@pytest.mark.slow
def test_norm_qkv_rope_cache(triton_ops, dtype, batch, group, bias):
    dim, kv_heads, head_dim, slots = 72, 2, 16, 20
    heads = kv_heads * group
    rows = (heads + 2 * kv_heads) * head_dim
    h, norm_w = rand(batch, dim, dtype=dtype), rand(dim, dtype=dtype) + 1
    w_qkv, b_qkv = rand(rows, dim, dtype=dtype, scale=0.1), rand(rows, dtype=dtype) if bias else None
    _check_norm_qkv_rope_cache(triton_ops, dtype, h, norm_w, w_qkv, b_qkv, slots, heads, kv_heads, head_dim)


def _check_norm_qkv_rope_cache(triton_ops, dtype, h, norm_w, w_qkv, b_qkv, slots, heads, kv_heads, head_dim):
    """q out and both caches written, against the reference (positions 3, 19, 0 of the batch's sequences)."""
    batch = h.shape[0]
    positions = torch.tensor([3, 19, 0][:batch])
    caches = [rand(batch, slots, kv_heads, head_dim, dtype=dtype) for _ in range(2)]
    want_caches = [c.clone() for c in caches]
    args = (h, norm_w, EPS, w_qkv, b_qkv, positions, inv_freq(head_dim))
    got = triton_ops.norm_qkv_rope_cache(*args, *caches, heads, kv_heads)
    want = ref.norm_qkv_rope_cache(*args, *want_caches, heads, kv_heads)
    close(got, want, dtype, roundings=2)
    close(caches[0], want_caches[0], dtype, roundings=2)
    close(caches[1], want_caches[1], dtype, roundings=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.slow
def test_fused_decode_gemvs(triton_ops, dtype, batch):
    dim, ffn, vocab = 72, 40, 130
    h, norm_w, residual = rand(batch, dim, dtype=dtype), rand(dim, dtype=dtype) + 1, rand(batch, dim, dtype=dtype)
    w_o, w_gate_up = rand(dim, 2 * ffn, dtype=dtype, scale=0.1), rand(2 * ffn, dim, dtype=dtype, scale=0.1)
    w_head = rand(vocab, dim, dtype=dtype, scale=0.1)
    act = rand(batch, 2 * ffn, dtype=dtype)
    close(triton_ops.linear_residual(act, w_o, residual), ref.add(residual, ref.linear(act, w_o)), dtype)
    close(triton_ops.norm_gate_up_swiglu(h, norm_w, EPS, w_gate_up),
          ref.swiglu(ref.linear(ref.rms_norm(h, norm_w, EPS), w_gate_up)), dtype, roundings=3)
    close(triton_ops.norm_linear(h, norm_w, EPS, w_head),
          ref.linear(ref.rms_norm(h, norm_w, EPS), w_head), dtype, roundings=2)


@pytest.mark.slow
def test_one_token_gemvs_on_the_k_4096_and_qkv_tiles(triton_ops, monkeypatch):
    """One token over a K of 2,049–4,096 (one 4,096-wide tile, 1,096 lanes masked), and q/k/v with 4 row pairs a
    program (the rule gives it from 2,048 pairs; forced here on a small shape to keep the interpreter quick): the
    tiles of results/engine-llama-b1-h100-2026-11-26, against the reference."""
    from kernelscope.engine.kernels import linear

    dtype, dim, out, ffn, vocab = torch.bfloat16, 3000, 40, 40, 130
    for kind, rows in (("residual", out), ("gate_up", ffn), ("head", vocab)):
        assert linear.gemv_plan(kind, 1, rows, dim, 132).block_k == 4096, kind
    h, norm_w, residual = rand(1, dim, dtype=dtype), rand(dim, dtype=dtype) + 1, rand(1, out, dtype=dtype)
    w_o, act = rand(out, dim, dtype=dtype, scale=dim ** -0.5), rand(1, dim, dtype=dtype)
    w_gate_up = rand(2 * ffn, dim, dtype=dtype, scale=dim ** -0.5)
    w_head = rand(vocab, dim, dtype=dtype, scale=dim ** -0.5)
    close(triton_ops.linear_residual(act, w_o, residual), ref.add(residual, ref.linear(act, w_o)), dtype)
    close(triton_ops.norm_gate_up_swiglu(h, norm_w, EPS, w_gate_up),
          ref.swiglu(ref.linear(ref.rms_norm(h, norm_w, EPS), w_gate_up)), dtype, roundings=3)
    close(triton_ops.norm_linear(h, norm_w, EPS, w_head),
          ref.linear(ref.rms_norm(h, norm_w, EPS), w_head), dtype, roundings=2)
    assert linear.gemv_plan("qkv", 1, 3072, 4096, 132)[:2] == (4, 2048)
    tiles = linear.gemv_tiles
    monkeypatch.setattr(linear, "gemv_tiles", lambda kind, batch, rows, k, splits: (4, *tiles(kind, batch, rows, k,
                                                                                              splits)[1:]))
    qkv_dim, heads, kv_heads, head_dim = 72, 4, 2, 16
    h, norm_w = rand(1, qkv_dim, dtype=dtype), rand(qkv_dim, dtype=dtype) + 1
    w_qkv = rand((heads + 2 * kv_heads) * head_dim, qkv_dim, dtype=dtype, scale=0.1)
    _check_norm_qkv_rope_cache(triton_ops, dtype, h, norm_w, w_qkv, None, 20, heads, kv_heads, head_dim)


def test_decode_gemv_plans_at_qwen2_1_5b_shapes():
    """Tiles and splits by kind of GEMV at qwen2-1.5b shapes on 132 SMs (an H100), as the sweeps picked them
    (results/engine-tiles-h100-2026-11-26, results/engine-splits-h100-2026-11-26): q/k/v 128 × 8 warps × 3 split
    four ways, down 128 × 4 warps × 4 split six ways; o_proj and gate/up keep theirs, unsplit; one token unsplit."""
    from kernelscope.engine.errors import EngineError
    from kernelscope.engine.kernels.linear import gemv_plan

    shapes = {"qkv": ("qkv", 1024, 1536), "o_proj": ("residual", 1536, 1536), "gate_up": ("gate_up", 8960, 1536),
              "down": ("residual", 1536, 8960), "head": ("head", 151936, 1536)}
    want = {"qkv": (16, 128, 8, 3, True, 4, 384), "o_proj": (16, 256, 4, 4, True, 1, 1536),
            "gate_up": (32, 128, 8, 3, True, 1, 1536), "down": (16, 128, 4, 4, True, 6, 1536),
            "head": (64, 256, 4, 4, True, 1, 1536)}
    for batch in (2, 4, 8):
        assert {name: tuple(gemv_plan(kind, batch, rows, k, 132)) for name, (kind, rows, k) in shapes.items()} == want
    for name, (kind, rows, k) in shapes.items():
        plan = gemv_plan(kind, 1, rows, k, 132)
        assert (plan.dot, plan.splits, plan.block_k) == (False, 1, 2048), name
    with pytest.raises(EngineError, match="unknown GEMV kind"):
        gemv_plan("o_proj", 8, 1536, 1536, 132)


def test_one_token_gemv_plans_by_k_and_kind():
    """One token (results/engine-llama-b1-h100-2026-11-26): a K of 2,049–4,096 is one 4,096-wide tile with half
    the rows per program; q/k/v keeps 2,048-wide tiles and takes 4 pairs per program from 2,048 pairs; shorter
    and longer K keep 2,048-wide tiles. Here at llama-3-8b shapes (K 4,096; down K 14,336)."""
    from kernelscope.engine.kernels.linear import gemv_plan

    shapes = {"qkv": ("qkv", 3072, 4096), "o_proj": ("residual", 4096, 4096), "gate_up": ("gate_up", 14336, 4096),
              "down": ("residual", 4096, 14336), "head": ("head", 128256, 4096)}
    want = {"qkv": (4, 2048), "o_proj": (2, 4096), "gate_up": (2, 4096), "down": (4, 2048), "head": (2, 4096)}
    got = {}
    for name, (kind, rows, k) in shapes.items():
        plan = gemv_plan(kind, 1, rows, k, 132)
        assert (plan.warps, plan.dot, plan.splits) == (4, False, 1), name
        got[name] = (plan.block_n, plan.block_k)
    assert got == want
    assert gemv_plan("residual", 1, 512, 3000, 132)[:2] == (1, 4096)  # one row a program stays one
    assert gemv_plan("qkv", 1, 2047, 4096, 132)[:2] == (2, 2048)  # below 2,048 pairs as before
    assert gemv_plan("qkv", 1, 1024, 1536, 132)[:2] == (1, 2048)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.slow
def test_split_k_decode_gemvs(triton_ops, dtype):
    """2–8 tokens over a long K: the decode GEMVs split K across programs (the interpreter counts an H100's 132
    SMs), the last split of each row block sums the parts in order and runs the fused epilogue; a second call
    gives the same bits (the counters were reset, the order is fixed)."""
    from kernelscope.engine.kernels.gemm import sm_count
    from kernelscope.engine.kernels.linear import gemv_plan

    batch, dim, ffn, vocab, kv_heads, group, head_dim, slots = 3, 2048, 40, 48, 2, 2, 16, 20
    heads = kv_heads * group
    rows = (heads + 2 * kv_heads) * head_dim
    sms = sm_count(torch.device("cpu"))
    # o_proj, gate/up, head and q/k/v pairs: every one is split
    for kind, n in (("residual", 40), ("gate_up", ffn), ("head", vocab), ("qkv", rows // 2)):
        assert gemv_plan(kind, batch, n, dim, sms).splits > 1
    h, norm_w = rand(batch, dim, dtype=dtype), rand(dim, dtype=dtype) + 1
    w_o, residual = rand(40, dim, dtype=dtype, scale=0.05), rand(batch, 40, dtype=dtype)
    w_gate_up, w_head = rand(2 * ffn, dim, dtype=dtype, scale=0.05), rand(vocab, dim, dtype=dtype, scale=0.05)
    got = triton_ops.linear_residual(h, w_o, residual)
    close(got, ref.add(residual, ref.linear(h, w_o)), dtype)
    assert torch.equal(got, triton_ops.linear_residual(h, w_o, residual))
    close(triton_ops.norm_gate_up_swiglu(h, norm_w, EPS, w_gate_up),
          ref.swiglu(ref.linear(ref.rms_norm(h, norm_w, EPS), w_gate_up)), dtype, roundings=3)
    close(triton_ops.norm_linear(h, norm_w, EPS, w_head), ref.linear(ref.rms_norm(h, norm_w, EPS), w_head), dtype,
          roundings=2)
    w_qkv, b_qkv = rand(rows, dim, dtype=dtype, scale=0.05), rand(rows, dtype=dtype)
    _check_norm_qkv_rope_cache(triton_ops, dtype, h, norm_w, w_qkv, b_qkv, slots, heads, kv_heads, head_dim)
