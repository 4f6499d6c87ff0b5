"""The Triton operators (under TRITON_INTERPRET=1 on CPU) against the PyTorch reference.

Tolerances are relative (‖out − ref‖ / ‖ref‖): the interpreter rounds fp32 → bf16 by truncation, so bf16 results
may differ from the reference by one unit in the last place.
"""

from __future__ import annotations

import pytest
import torch

from kernelscope.engine import reference as ref
from tests.unit.engine import op_checks
from tests.unit.engine.op_checks import DTYPES, EPS, close, inv_freq, rand

_seed = op_checks._seed  # torch seeded before every test: an autouse fixture



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


def test_torch_backend_is_the_reference(torch_ops):
    assert torch_ops.linear is ref.linear and torch_ops.norm_qkv_rope_cache is ref.norm_qkv_rope_cache


def test_unknown_backend_is_an_engine_error():
    from kernelscope.engine.errors import EngineError
    from kernelscope.engine.ops import Ops

    with pytest.raises(EngineError, match="unknown engine backend"):
        Ops("cuda")
