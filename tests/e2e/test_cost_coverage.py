"""Every kernel costed: the share of device time with analytic FLOPs and bytes on real LLM-inference traces, and
the costs of a few kernels of each against counts made here by hand from the trace files themselves (plain json:
the op's recorded shapes, the capture trace's, the serving annotation's token sums, the model's config.json),
never from kernelscope's output.

Traces: the public TraceLens serving windows (SGLang decode with its capture trace, vLLM decode with full CUDA
graphs and vLLM prefill+decode with piecewise graphs with theirs, SGLang prefill+decode), our own HF captures
(generate with stacks, plain, a profiler-step loop, a replayed CUDA graph with its capture, two tensor-parallel
ranks), kernelscope's own H200 captures (Llama-3-8B, Qwen2, DeepSeek-V3 MoE, and its two expert-parallel ranks),
and one of those without its shapes, given the model's config.json. Here: the coverage and the costs taken from
capture shapes; the other hand counts are in test_cost_hand_counts.py."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.e2e import cost_cases
from tests.e2e.cost_cases import (
    CAPTURED,
    CASES,
    SGLANG_CAPTURE,
    SGLANG_DECODE,
    VLLM_FULL,
    VLLM_FULL_CAPTURE,
    _annotation,
    _captured_launches,
    _events,
    _first_replay,
    _kernels,
    _pairs,
    _size,
)

pytestmark = pytest.mark.slow  # each case imports a trace
runs = cost_cases.runs  # each case's run, imported once per session: a fixture


# ---------------------------------------------------------------- coverage
@pytest.mark.parametrize("case", list(CASES))
def test_cost_coverage_of_every_llm_inference_trace(runs, case):
    run = runs(case)
    kernels = _kernels(run)
    total = kernels["dur_ns"].sum()
    costed = kernels.filter(pl.col("cost_model").is_not_null())
    share = costed["dur_ns"].sum() / total
    assert share >= 0.95, f"{case}: {share:.1%}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cost_coverage"] == pytest.approx(share)
    # Every costed kernel says where its cost came from, and the sources add up to the coverage.
    assert costed["cost_source"].null_count() == 0
    assert sum(summary["cost_coverage_by_source"].values()) == pytest.approx(share)
    for source, value in summary["cost_coverage_by_source"].items():
        own = costed.filter(pl.col("cost_source") == source)["dur_ns"].sum() / total
        assert value == pytest.approx(own), source


# ---------------------------------------------------------------- hand counts: capture shapes
def test_sglang_replayed_gemms_cost_what_their_capture_recorded(runs):
    kernels = _kernels(runs("sglang-decode"))
    correlation, replayed = _first_replay(SGLANG_DECODE)
    captured = _captured_launches(SGLANG_CAPTURE)
    assert len(replayed) == len(captured)  # ROCm names the captured kernels: an exact match
    mine = kernels.filter(pl.col("correlation") == correlation).sort("start_ns")
    checked = 0
    for i, (_, op) in enumerate(captured):
        if op is None or op["name"] != "aten::mm":
            continue
        (m, k), (_, n) = op["args"]["Input Dims"][:2]
        dtype = op["args"]["Input type"][0]
        assert mine["flops"][i] == 2 * m * n * k
        assert mine["bytes_moved"][i] == _size([m, k], dtype) + _size([k, n], dtype) + _size([m, n], dtype)
        assert (mine["gemm_m"][i], mine["gemm_n"][i], mine["gemm_k"][i]) == (m, n, k)
        assert mine["cost_source"][i] == "capture_shapes"
        checked += 1
    assert checked == 4 * 36 + 1  # four GEMMs in each of 36 layers, and the LM head


def test_sglang_decode_attention_costs_the_steps_contexts(runs):
    """The paged attention of each layer: queries [T, Hq, D] (the op's third input, as the capture recorded it) over
    the step's Σsk key tokens of Hkv heads (the KV cache's [slots, page, Hkv, D]); the work from the annotation."""
    kernels = _kernels(runs("sglang-decode"))
    correlation, _ = _first_replay(SGLANG_DECODE)
    captured = _captured_launches(SGLANG_CAPTURE)
    attention = [(i, op) for i, (_, op) in enumerate(captured) if op and op["name"].startswith("sglang_profiler::attention")]
    q_tokens, kv_tokens, pairs = _pairs(_annotation(SGLANG_DECODE))
    mine = kernels.filter(pl.col("correlation") == correlation).sort("start_ns")
    by_op: dict[int, list[int]] = {}
    for i, op in attention:
        by_op.setdefault(id(op), []).append(i)
    assert len(by_op) == 36
    for rows in by_op.values():
        dims = next(op for i, op in attention if i == rows[0])["args"]["Input Dims"]
        (_, heads, d), kv_heads = dims[2], dims[3][-2]
        assert sum(mine["flops"][i] for i in rows) == pytest.approx(2 * heads * (d + d) * pairs)
        assert sum(mine["bytes_moved"][i] for i in rows) == pytest.approx(
            2 * (q_tokens * heads * 2 * d + kv_tokens * kv_heads * 2 * d))
        assert {mine["cost_source"][i] for i in rows} == {"step_annotation"}


def test_vllm_full_graph_gemms_and_moe_cost_what_the_capture_recorded(runs):
    kernels = _kernels(runs("vllm-decode-full"))
    correlation, replayed = _first_replay(VLLM_FULL)
    captured = _captured_launches(VLLM_FULL_CAPTURE)
    assert len(replayed) == len(captured)
    mine = kernels.filter(pl.col("correlation") == correlation).sort("start_ns")
    addmm = [(i, op) for i, (_, op) in enumerate(captured) if op and op["name"] == "aten::addmm"]
    assert addmm
    for i, op in addmm:
        (bias, (m, k), (_, n)) = op["args"]["Input Dims"][:3]
        assert mine["flops"][i] == 2 * m * n * k
        assert mine["bytes_moved"][i] == 2 * (bias[0] + m * k + k * n + m * n)
    # The fused MoE: the routed rows (tokens × the k its TopK op was given) through the two expert weights that
    # the op's views show ([E, H/2, N] and [E, K/2, H], two 4-bit values a byte), one GEMM kernel each.
    events = _events(VLLM_FULL_CAPTURE)
    moe = min((e for e in events if e["name"] == "vllm::moe_forward"), key=lambda e: e["ts"])
    inside = sorted((e for e in events if e.get("cat") == "cpu_op" and e["tid"] == moe["tid"]
                     and moe["ts"] < e["ts"] < moe["ts"] + moe["dur"]), key=lambda e: e["ts"])
    top_k = int(next(e for e in inside if e["name"] == "TopK")["args"]["Concrete Inputs"][1])
    (tokens, hidden), (_, experts) = moe["args"]["Input Dims"][:2]
    views = [e["args"]["Input Dims"][0] for e in inside if e["name"] == "aten::view"
             and len(e["args"]["Input Dims"][0]) == 3 and e["args"]["Input Dims"][0][0] == experts]
    up, down = views[0], views[1]
    assert up[1] * 2 == hidden and down[2] == hidden
    expected = [2 * tokens * top_k * up[2] * hidden, 2 * tokens * top_k * hidden * down[1] * 2]
    moe_rows = [i for i, (_, op) in enumerate(captured) if op and op["name"] == "vllm::moe_forward"
                and mine["category"][i] == "GEMM" and "finalize" not in mine["name"][i]]
    assert [mine["flops"][i] for i in moe_rows[:2]] == expected
    assert mine["gemm_m"][moe_rows[0]] == tokens * top_k


def test_graph_replay_kernels_take_their_captured_ops_cost_by_position(runs):
    """Our own CUDA capture (launches unnamed: matched by position): replayed GEMM i costs captured aten::mm i."""
    kernels = _kernels(runs("hf-graph-replay"))
    captured = _captured_launches(CAPTURED / "graph_capture.json.gz")
    correlation, replayed = _first_replay(CAPTURED / "graph_replay.json.gz")
    assert len(replayed) == len(captured)
    mine = kernels.filter(pl.col("correlation") == correlation).sort("start_ns")
    mms = [(i, op) for i, (_, op) in enumerate(captured) if op and op["name"] == "aten::mm"]
    assert mms
    for i, op in mms:
        (m, k), (_, n) = op["args"]["Input Dims"][:2]
        if mine["kind"][i] != "kernel" or mine["name"][i].startswith("void cublasLt::splitKreduce"):
            continue  # the memset cuBLAS launches before a split-K GEMM costs its own bytes; the reduction no FLOPs
        assert mine["flops"][i] == 2 * m * n * k and mine["cost_source"][i] == "capture_shapes"
