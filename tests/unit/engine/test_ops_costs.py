"""Each Triton launch declares its exact cost (kernelscope.engine_costs) under the profiler: check the
declarations against hand-written formulas (docs/engine.md, "Kernel costs")."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernelscope.engine_costs import parse_cost_range

BF16 = torch.bfloat16


def declared(fn) -> list[tuple[str, float, float, str]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    costs = [parse_cost_range(event.name) for event in prof.events()]
    return [cost for cost in costs if cost is not None]


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(BF16)


def test_linear_costs(triton_ops):
    x, w, b = r(3, 72), r(50, 72), r(50)
    # 2–8 tokens run on the tensor cores (bf16 roof), one token on the CUDA cores (fp32).
    assert declared(lambda: triton_ops.linear(x, w, b)) == [
        ("ks_gemv", 2 * 3 * 50 * 72 + 3 * 50, 2 * (3 * 72 + 50 * 72 + 3 * 50 + 50), "bf16")]
    assert declared(lambda: triton_ops.linear(x[:1], w)) == [
        ("ks_gemv", 2 * 50 * 72, 2 * (72 + 50 * 72 + 50), "fp32")]
    x = r(37, 72)
    assert declared(lambda: triton_ops.linear(x, w)) == [
        ("ks_gemm", 2 * 37 * 50 * 72, 2 * (37 * 72 + 50 * 72 + 37 * 50), "bf16")]
    # Fused gate/up + SwiGLU (F = 25): both halves' products, silu·up (5 per output); x, both halves, the output.
    assert declared(lambda: triton_ops.gate_up_swiglu(x, w)) == [
        ("ks_gemm_swiglu", 2 * 37 * 50 * 72 + 5 * 37 * 25, 2 * (37 * 72 + 50 * 72 + 37 * 25), "bf16")]


def test_elementwise_and_norm_costs(triton_ops):
    x, y, w = r(5, 72), r(5, 72), r(72)
    assert declared(lambda: triton_ops.add(x, y)) == [("ks_add", 360, 3 * 360 * 2, "fp32")]
    assert declared(lambda: triton_ops.rms_norm(x, w, 1e-6)) == [
        ("ks_rms_norm", 4 * 360, (2 * 360 + 72) * 2, "fp32")]
    assert declared(lambda: triton_ops.add_rms_norm(x, y, w, 1e-6)) == [
        ("ks_add_rms_norm", 5 * 360, (4 * 360 + 72) * 2, "fp32")]
    assert declared(lambda: triton_ops.swiglu(r(5, 80))) == [("ks_swiglu", 5 * 5 * 40, 3 * 5 * 40 * 2, "fp32")]
    ids = torch.tensor([1, 2, 3])
    assert declared(lambda: triton_ops.embedding(ids, r(10, 72))) == [
        ("ks_embedding", 0, 3 * 8 + 2 * 3 * 72 * 2, "fp32")]
    q, k, positions = r(5, 4, 16), r(5, 2, 16), torch.arange(5)
    inv_freq = torch.ones(8)
    caches = [r(1, 8, 2, 16), r(1, 8, 2, 16)]
    # Prefill's split: 3 flops per roped element (q and k), qkv read and written, positions (int64), inv_freq fp32.
    assert declared(lambda: triton_ops.qkv_rope_cache(r(1, 5, 8 * 16), positions, inv_freq, *caches, 4, 2)) == [
        ("ks_qkv_rope_cache", 3 * 5 * 6 * 16, 2 * 5 * 128 * 2 + 5 * 8 + 8 * 4, "fp32")]
    assert declared(lambda: triton_ops.rope(q, k, positions, inv_freq)) == [
        ("ks_rope", 3 * 5 * 6 * 16, 2 * 5 * 6 * 16 * 2 + 5 * 8 + 8 * 4, "fp32")]


def test_attention_costs(triton_ops):
    batch, length, heads, kv_heads, dh = 2, 37, 4, 2, 16
    q, kv = r(batch, length, heads, dh), r(batch, length, kv_heads, dh)
    flops = 4 * batch * heads * dh * length * (length + 1) // 2
    nbytes = (2 * batch * length * heads * dh + 2 * batch * length * kv_heads * dh) * 2
    assert declared(lambda: triton_ops.attention_prefill(q, kv, kv, 0.25)) == [
        ("ks_attn_prefill", flops, nbytes, "bf16")]
    slots = 100
    qd, cache = r(batch, heads, dh), r(batch, slots, kv_heads, dh)
    lengths = torch.tensor([10, 90])

    def decode_cost(tokens: int, active: int) -> tuple:
        # One launch: the active splits' partials (written, then read by the combine in the same kernel), the
        # output. 2 splits launched (ceil(100 slots / 64)); 64-slot splits while 2 of them cover the length.
        part_bytes = active * heads * (dh + 1) * 4
        return ("ks_attn_decode_split", 4 * tokens * heads * dh + 3 * active * heads * dh,
                batch * heads * dh * 2 + 2 * tokens * kv_heads * dh * 2 + 2 * 8 + 2 * part_bytes
                + batch * heads * dh * 2, "bf16")

    # Per-sequence lengths: 10 slots in 1 split, 90 in 2.
    assert declared(lambda: triton_ops.attention_decode(qd, cache, cache, lengths, 0.25, kv_tokens=[10, 90])) == [
        decode_cost(100, 3)]
    # A sum stands for sequences of equal length (50 and 50: 1 split each), as Engine.generate's steps have.
    assert declared(lambda: triton_ops.attention_decode(qd, cache, cache, lengths, 0.25, kv_tokens=100)) == [
        decode_cost(100, 2)]
    # Unknown lengths: every slot (100 in 2 splits of 64 each).
    assert declared(lambda: triton_ops.attention_decode(qd, cache, cache, lengths, 0.25)) == [
        decode_cost(200, 4)]


def test_fused_decode_costs(triton_ops):
    batch, dim, ffn, heads, kv_heads, dh = 3, 72, 40, 4, 2, 16
    h, norm_w = r(batch, dim), r(dim)
    norm_flops, norm_bytes = 4 * batch * dim, (batch * dim + dim) * 2
    w_gu = r(2 * ffn, dim)
    assert declared(lambda: triton_ops.norm_gate_up_swiglu(h, norm_w, 1e-6, w_gu)) == [
        ("ks_gemv_gate_up", norm_flops + 2 * batch * 2 * ffn * dim + 5 * batch * ffn,
         norm_bytes + (2 * ffn * dim + batch * ffn) * 2, "bf16")]
    w_head = r(100, dim)
    assert declared(lambda: triton_ops.norm_linear(h, norm_w, 1e-6, w_head)) == [
        ("ks_gemv_head", norm_flops + 2 * batch * 100 * dim, norm_bytes + (100 * dim + batch * 100) * 2, "bf16")]
    x, w_o, residual = r(batch, 64), r(dim, 64), r(batch, dim)
    assert declared(lambda: triton_ops.linear_residual(x, w_o, residual)) == [
        ("ks_gemv_residual", 2 * batch * dim * 64 + batch * dim,
         (batch * 64 + dim * 64 + 2 * batch * dim) * 2, "bf16")]
    rows = (heads + 2 * kv_heads) * dh
    w_qkv, b_qkv = r(rows, dim), r(rows)
    cache = r(batch, 8, kv_heads, dh)
    positions, inv_freq = torch.tensor([0, 1, 2]), torch.ones(dh // 2)
    flops = norm_flops + 2 * batch * rows * dim + batch * rows + 3 * batch * (heads + kv_heads) * dh
    nbytes = norm_bytes + (rows * dim + rows + batch * rows) * 2 + batch * 8 + dh // 2 * 4
    assert declared(lambda: triton_ops.norm_qkv_rope_cache(h, norm_w, 1e-6, w_qkv, b_qkv, positions, inv_freq,
                                                           cache, cache.clone(), heads, kv_heads)) == [
        ("ks_gemv_qkv", flops, nbytes, "bf16")]


@pytest.mark.slow
def test_split_decode_gemv_costs(triton_ops):
    """A split GEMV (K = 2,048 at 3 tokens on the interpreter's 132 SMs) adds its fp32 partial sums, written by
    every split and read back by the last: 2 · row blocks · splits · 16 padded tokens · BLOCK_N · 4 bytes, twice for
    the paired q/k/v (kernels/linear.py GEMV_SPLIT_RULES)."""
    batch, dim, heads, kv_heads, dh = 3, 2048, 4, 2, 16
    x, w_o, residual = r(batch, dim), r(40, dim), r(batch, 40)
    # residual: 3 row blocks of 16, 2 splits of 1,024 (each split ≥ 1,024 K elements)
    assert declared(lambda: triton_ops.linear_residual(x, w_o, residual)) == [
        ("ks_gemv_residual", 2 * batch * 40 * dim + batch * 40,
         (batch * dim + 40 * dim + 2 * batch * 40) * 2 + 2 * 3 * 2 * 16 * 16 * 4, "bf16")]
    # q/k/v: 64 rotation pairs = 4 row blocks of 16; 4 splits of 512 (each ≥ 384, a multiple of BLOCK_K 128)
    h, norm_w = r(batch, dim), r(dim)
    rows = (heads + 2 * kv_heads) * dh
    w_qkv, cache = r(rows, dim), r(batch, 8, kv_heads, dh)
    positions, inv_freq = torch.tensor([0, 1, 2]), torch.ones(dh // 2)
    flops = 4 * batch * dim + 2 * batch * rows * dim + 3 * batch * (heads + kv_heads) * dh
    nbytes = ((batch * dim + dim) * 2 + (rows * dim + batch * rows) * 2 + batch * 8 + dh // 2 * 4
              + 2 * 4 * 4 * 2 * 16 * 16 * 4)
    assert declared(lambda: triton_ops.norm_qkv_rope_cache(h, norm_w, 1e-6, w_qkv, None, positions, inv_freq,
                                                           cache, cache.clone(), heads, kv_heads)) == [
        ("ks_gemv_qkv", flops, nbytes, "bf16")]


def test_sampling_costs(triton_ops):
    logits = r(2, 1000)
    # One part per row (1000 < one 2048-column block): its (value fp32, index int64) written and read back.
    partials = 2 * 2 * 1 * (4 + 8)
    assert declared(lambda: triton_ops.argmax(logits)) == [("ks_argmax", 2000, 2 * (1000 * 2 + 8) + partials,
                                                            "fp32")]
    (name, flops, nbytes, _), = declared(lambda: triton_ops.sample(logits, 0.7, 10, 0.9, None))
    assert (name, flops, nbytes) == ("ks_sample", (2 + 32 + 30) * 4 * 2000, 2 * (1000 * (2 + 4) + 8))
