"""The Triton operators (under TRITON_INTERPRET=1 on CPU) against the PyTorch reference.

Tolerances are relative (‖out − ref‖ / ‖ref‖): the interpreter rounds fp32 → bf16 by truncation, so bf16 results
may differ from the reference by one unit in the last place.
"""

from __future__ import annotations

import pytest
import torch

from kernelscope.engine import reference as ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
EPS = 1e-6


def close(out: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, roundings: int = 1) -> None:
    """Relative error within the dtype's tolerance per rounding step that can differ (fused chains have more)."""
    assert out.shape == want.shape and out.dtype == want.dtype
    assert torch.isfinite(out.float()).all()
    err = ((out.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
    assert err <= roundings * TOL[dtype], f"relative error {err:.3g} > {roundings * TOL[dtype]}"


def rand(*shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(dtype)


def inv_freq(head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    return 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise(triton_ops, dtype):
    x, y = rand(7, 72, dtype=dtype), rand(7, 72, dtype=dtype)
    close(triton_ops.add(x, y), ref.add(x, y), dtype)
    out = torch.empty_like(x)
    assert triton_ops.add(x, y, out=out) is out
    table = rand(1000, 100, dtype=dtype)[:, :72]  # strided rows
    ids = torch.tensor([999, 0, 17, 17, 503])
    assert torch.equal(triton_ops.embedding(ids, table), ref.embedding(ids, table))
    gate_up = rand(5, 2 * 72 + 8, dtype=dtype)[:, : 2 * 72]  # strided rows
    close(triton_ops.swiglu(gate_up), ref.swiglu(gate_up), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norms(triton_ops, dtype):
    x = rand(5, 80, dtype=dtype)[:, :72]  # strided rows
    residual, w = rand(5, 72, dtype=dtype), rand(72, dtype=dtype) + 1
    close(triton_ops.rms_norm(x, w, EPS), ref.rms_norm(x, w, EPS), dtype)
    normed, new_residual = triton_ops.add_rms_norm(x, residual, w, EPS)
    want_normed, want_residual = ref.add_rms_norm(x, residual, w, EPS)
    close(normed, want_normed, dtype)
    close(new_residual, want_residual, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_on_views_of_qkv(triton_ops, dtype):
    tokens, heads, kv_heads, head_dim = 6, 4, 1, 16
    qkv = rand(tokens, (heads + 2 * kv_heads) * head_dim, dtype=dtype).view(tokens, heads + 2 * kv_heads, head_dim)
    q, k = qkv[:, :heads], qkv[:, heads:heads + kv_heads]
    positions = torch.tensor([0, 1, 5, 77, 1000, 4095])
    got = triton_ops.rope(q, k, positions, inv_freq(head_dim))
    want = ref.rope(q, k, positions, inv_freq(head_dim))
    close(got[0], want[0], dtype)
    close(got[1], want[1], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 3, 8, 37])
@pytest.mark.slow
def test_linear(triton_ops, dtype, tokens):
    x = rand(tokens, 80, dtype=dtype)[:, :72]  # strided rows
    w, b = rand(50, 72, dtype=dtype, scale=0.1), rand(50, dtype=dtype)
    close(triton_ops.linear(x, w, b), ref.linear(x, w, b), dtype)
    close(triton_ops.linear(x, w), ref.linear(x, w), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [3, 37, 300])
def test_gate_up_swiglu(triton_ops, dtype, tokens):
    """Prefill's fused gate/up GEMM + SwiGLU (both tile sizes: ≤ 256 rows and more) and the GEMV path."""
    x = rand(tokens, 80, dtype=dtype)[:, :72]  # strided rows
    w_gate_up = rand(2 * 40, 72, dtype=dtype, scale=0.1)
    # Rounded to the dtype at gate, up, silu and the product: three roundings' tolerance, as the decode op.
    close(triton_ops.gate_up_swiglu(x, w_gate_up), ref.gate_up_swiglu(x, w_gate_up), dtype, roundings=3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "k"), [(37, 2048), (200, 1024)])
@pytest.mark.slow
def test_linear_split_k(triton_ops, dtype, tokens, k):
    """Few output tiles and a long K: the GEMM splits K (4 and 2 splits here) and its last split sums them."""
    from kernelscope.engine.kernels.gemm import gemm_splits

    assert gemm_splits(tokens, 50, k, 132)[0] == (4 if tokens == 37 else 2)
    x, w, b = rand(tokens, k, dtype=dtype), rand(50, k, dtype=dtype, scale=0.05), rand(50, dtype=dtype)
    first = triton_ops.linear(x, w, b)
    close(first, ref.linear(x, w, b), dtype)
    assert torch.equal(triton_ops.linear(x, w, b), first)  # counters reset, the sum in split order each time


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_first_maximum(triton_ops, dtype):
    # 5000 columns: three parts of one row (2048 columns each), combined by the last part to finish.
    logits = rand(5, 5000, dtype=dtype)
    logits[1, 7] = logits[1, 2100] = 50.0  # a tie across parts: the first index wins
    logits[2, 1030] = logits[2, 1031] = 50.0  # a tie inside one block
    logits[3, 4999] = 60.0  # the maximum in the last, shorter part
    logits[4] = float("-inf")  # nothing larger than -inf: index 0, as torch
    assert torch.equal(triton_ops.argmax(logits), ref.argmax(logits))
    assert triton_ops.argmax(logits).tolist()[1:] == [7, 1030, 4999, 0]
    assert triton_ops.argmax(logits).tolist()[1:] == [7, 1030, 4999, 0]  # the counters were reset


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(0.0, 0, 1.0), (0.8, 0, 1.0), (0.7, 20, 1.0), (1.0, 0, 0.9), (0.6, 50, 0.8)])
@pytest.mark.slow
def test_sample_matches_reference_draws(triton_ops, dtype, temperature, top_k, top_p):
    logits = rand(3, 1000, dtype=dtype, scale=3.0)
    got = triton_ops.sample(logits, temperature, top_k, top_p, torch.Generator().manual_seed(3))
    want = ref.sample(logits, temperature, top_k, top_p, torch.Generator().manual_seed(3))
    assert got.dtype == torch.int64
    assert torch.equal(got, want)


def test_sample_keeps_ties_and_filters(triton_ops):
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0] * 20])
    maxima = set(range(0, 100, 5))
    # top-k = 1 keeps every copy of the maximum; top-p = 0.5 too (the 4.0 group holds 64% of the mass).
    assert set(torch.nonzero(ref.filtered_probs(logits, 1.0, 0, 0.5)[0]).flatten().tolist()) == maxima
    assert set(torch.nonzero(ref.filtered_probs(logits, 1.0, 1, 1.0)[0]).flatten().tolist()) == maxima
    gen = torch.Generator().manual_seed(0)
    draws = {triton_ops.sample(logits, 1.0, 1, 1.0, gen).item() for _ in range(4)}
    draws |= {triton_ops.sample(logits, 1.0, 0, 0.5, gen).item() for _ in range(4)}
    assert draws <= maxima and len(draws) > 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "group", "length"), [(1, 1, 37), (3, 4, 37), (1, 2, 130)])
def test_attention_prefill(triton_ops, dtype, batch, group, length):
    kv_heads, head_dim = 2, 16
    heads = kv_heads * group
    qkv = rand(batch, length, heads + 2 * kv_heads, head_dim, dtype=dtype)  # q, k, v are strided views
    q, k, v = qkv[:, :, :heads], qkv[:, :, heads:heads + kv_heads], qkv[:, :, heads + kv_heads:]
    close(triton_ops.attention_prefill(q, k, v, head_dim**-0.5), ref.attention_prefill(q, k, v, head_dim**-0.5),
          dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "group"), [(1, 1), (3, 4)])
def test_attention_decode(triton_ops, dtype, batch, group):
    slots, kv_heads, head_dim = 150, 2, 16
    heads = kv_heads * group
    q = rand(batch, heads, head_dim, dtype=dtype)
    k_cache, v_cache = rand(batch, slots, kv_heads, head_dim, dtype=dtype), rand(batch, slots, kv_heads, head_dim,
                                                                                  dtype=dtype)
    lengths = torch.tensor([1, 150, 64][:batch], dtype=torch.int32)
    out = torch.empty_like(q)
    got = triton_ops.attention_decode(q, k_cache, v_cache, lengths, 0.3, out=out)
    assert got is out
    close(got, ref.attention_decode(q, k_cache, v_cache, lengths, 0.3), dtype)


@pytest.mark.parametrize(("batch", "group"), [(1, 1), (1, 4), (3, 1), (3, 4)])
@pytest.mark.slow
def test_attention_decode_back_to_back(triton_ops, batch, group):
    """The last split of each (sequence, KV head) combines and resets its counter: calls in a row, with other
    lengths (other numbers of non-empty splits) and the same output buffer, each write the full right answer."""
    from kernelscope.engine.kernels.attention import decode_plan, split_counters

    slots, kv_heads, head_dim, dtype = 200, 2, 16, torch.float32
    plan = decode_plan(batch, kv_heads, group, head_dim, slots)
    assert plan.splits == 4 and [plan.active(n) for n in (1, 64, 65, 129, 200)] == [1, 1, 2, 3, 4]
    heads = kv_heads * group
    k_cache = rand(batch, slots, kv_heads, head_dim, dtype=dtype)
    v_cache = rand(batch, slots, kv_heads, head_dim, dtype=dtype)
    out = torch.empty(batch, heads, head_dim, dtype=dtype)
    counters = split_counters(out.device, batch * kv_heads)
    for lengths in ([200, 1, 65], [130, 64, 200], [1, 129, 7], [64, 200, 128]):
        lengths = torch.tensor(lengths[:batch])
        q = rand(batch, heads, head_dim, dtype=dtype)
        out.fill_(float("nan"))
        assert triton_ops.attention_decode(q, k_cache, v_cache, lengths, 0.3, out=out) is out
        close(out, ref.attention_decode(q, k_cache, v_cache, lengths, 0.3), dtype)
        assert split_counters(out.device, batch * kv_heads) is counters and not counters.any()


def test_decode_plan_at_model_shapes():
    """At most 64 splits per (sequence, KV head) (results/engine-attention-h100-2026-11-26, "Cap validation"):
    3d1bb7d's split counts, 64-slot splits while splits × 64 covers the context, and a combine chunk of 16 splits
    (more active splits are combined in chunks)."""
    pytest.importorskip("triton")
    from kernelscope.engine.kernels.attention import decode_plan, pow2

    slots = 2304  # the engine's cache in the benchmarks
    # (batch, KV heads, group, head dim) → splits, warps
    cases = {"qwen2-1.5b B1": ((1, 2, 6, 128), 36, 8), "llama-3-8b B1": ((1, 8, 4, 128), 33, 4),
             "qwen2-1.5b B8": ((8, 2, 6, 128), 17, 8), "llama-3-8b B8": ((8, 8, 4, 128), 5, 4)}
    for name, ((batch, kv_heads, group, head_dim), splits, warps) in cases.items():
        plan = decode_plan(batch, kv_heads, group, head_dim, slots)
        assert (plan.splits, plan.warps, plan.granule, plan.block_s) == (splits, warps, 64, 64), name
        assert plan.combine // (pow2(group) * head_dim) == 16, name
    qwen = decode_plan(1, 2, 6, 128, slots)
    # qwen2-1.5b batch 1: one 64-slot step per program up to the whole cache (the 16-split cap took 3 from 2,049).
    assert [(qwen.split_len(n), qwen.active(n)) for n in (201, 1000, 2048, 2064, 2200, 2304)] == [
        (64, 4), (64, 16), (64, 32), (64, 33), (64, 35), (64, 36)]
    llama = decode_plan(1, 8, 4, 128, slots)
    assert [(llama.split_len(n), llama.active(n)) for n in (201, 2048, 2112, 2113, 2200)] == [
        (64, 4), (64, 32), (64, 33), (128, 17), (128, 18)]


@pytest.mark.parametrize("group", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_attention_decode_combine_in_chunks(triton_ops, monkeypatch, group):
    """More active splits than one combine chunk holds (as 17–36 at the model shapes, 16 a chunk): the combine
    loops over chunks and merges them by the running log-sum-exp. Here a chunk of 2 splits, 5 splits of 64."""
    from kernelscope.engine.kernels import attention

    batch, slots, kv_heads, head_dim, dtype = 2, 320, 2, 16, torch.float32
    plan = attention.DecodePlan(5, 64, 64, 4, 2, combine=2 * attention.pow2(group) * head_dim)
    monkeypatch.setattr(attention, "decode_plan", lambda *args, **kwargs: plan)
    heads = kv_heads * group
    k_cache = rand(batch, slots, kv_heads, head_dim, dtype=dtype)
    v_cache = rand(batch, slots, kv_heads, head_dim, dtype=dtype)
    out = torch.empty(batch, heads, head_dim, dtype=dtype)
    for lengths in ([320, 130], [257, 64], [100, 193]):  # active splits 5 / 3 / 1 / 2 / 4: 3 / 2 / 1 / 1 / 2 chunks
        lengths = torch.tensor(lengths)
        q = rand(batch, heads, head_dim, dtype=dtype)
        out.fill_(float("nan"))
        triton_ops.attention_decode(q, k_cache, v_cache, lengths, 0.3, out=out)
        close(out, ref.attention_decode(q, k_cache, v_cache, lengths, 0.3), dtype)


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


def test_torch_backend_is_the_reference(torch_ops):
    assert torch_ops.linear is ref.linear and torch_ops.norm_qkv_rope_cache is ref.norm_qkv_rope_cache


def test_unknown_backend_is_an_engine_error():
    from kernelscope.engine.errors import EngineError
    from kernelscope.engine.ops import Ops

    with pytest.raises(EngineError, match="unknown engine backend"):
        Ops("cuda")


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
