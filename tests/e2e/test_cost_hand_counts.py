"""Costs of real LLM-inference traces against counts made here by hand from the trace files (plain json): eager
attention from a serving step's annotation, NCCL kernels from their messages, MoE expert indexing from the op that
uses it, a trace without shapes from the model's config.json, and the GEMM shape table of the reports, the CSV
and `query`. The traces and the reading helpers are cost_cases.py's."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from tests.e2e import cost_cases

pytestmark = pytest.mark.slow  # each case imports a trace
runs = cost_cases.runs  # each case's run, imported once per session: a fixture



# ---------------------------------------------------------------- hand counts: step annotations on eager ops
@pytest.mark.parametrize(("case", "path", "op_name"), [
    ("vllm-piecewise", cost_cases.VLLM_PIECEWISE, "vllm::unified_attention_with_output"),
    ("sglang-prefill-decode", cost_cases.SGLANG_PREFILL, "aiter::mha_batch_prefill"),
])
def test_eager_attention_of_an_annotated_step(runs, case, path, op_name):
    """vLLM's mixed step (9 prefill and 37 decode requests) and SGLang's prefill: the attention op's queries
    [T, Hq, D] and keys [·, Hkv, D] from its own shapes, the pairs and contexts from the step's annotation."""
    kernels = cost_cases._kernels(runs(case))
    events = cost_cases._events(path)
    ops = cost_cases._ops(events)
    q_tokens, kv_tokens, pairs = cost_cases._pairs(cost_cases._annotation(path))
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    calls = [e for e in events if e["name"] == op_name]
    assert calls
    for call in calls[:3]:
        (_, heads, d), (*_, kv_heads, dk), (*_, dv) = call["args"]["Input Dims"][:3]
        mine = [k for k in events if k.get("cat") == "kernel" and (c := launches.get(k["args"]["correlation"]))
                and cost_cases._innermost(ops.get(c["tid"], []), c["ts"], op_name) is call]
        assert mine
        rows = kernels.filter(pl.col("correlation").is_in([k["args"]["correlation"] for k in mine]))
        assert rows["flops"].sum() == pytest.approx(2 * heads * (d + dv) * pairs)
        assert rows["bytes_moved"].sum() == pytest.approx(2 * (q_tokens * heads * (d + dv) + kv_tokens * kv_heads * (dk + dv)))
        assert set(rows["cost_source"].to_list()) == {"step_annotation"}


# ---------------------------------------------------------------- hand counts: launch records, estimates
def test_nccl_kernels_cost_their_messages(runs):
    kernels = cost_cases._kernels(runs("hf-tp2"))
    for rank, path in enumerate((cost_cases.CAPTURED / "tp2_rank0.json.gz", cost_cases.CAPTURED / "tp2_rank1.json.gz")):
        nccl = [e for e in cost_cases._events(path) if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {})]
        assert nccl
        for e in nccl[:5]:
            row = kernels.filter((pl.col("rank") == rank) & (pl.col("correlation") == e["args"]["correlation"]))
            element = {"BFloat16": 2, "Float": 4}[e["args"]["dtype"]]
            assert row["bytes_moved"].item() == (e["args"]["In msg nelems"] + e["args"]["Out msg nelems"]) * element
            assert row["cost_source"].item() == "kernel_metadata"


def test_moe_expert_indexing_is_estimated_from_the_op_that_uses_it(runs):
    """HF DeepSeek-V3's experts index their stacked weights ([256, a, b]) by the routed experts; the profiler
    records neither the index nor the result, but the next op takes the result ([n, a, b]): n experts' rows read
    and written, labelled estimated."""
    kernels = cost_cases._kernels(runs("deepseek-v3-moe"))
    events = cost_cases._events(cost_cases.KINETO / "h200-deepseek-v3-p16-n3.trace.json.gz")
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"]))
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    index = [i for i, e in enumerate(ops) if e["name"] == "aten::index"
             and len(e["args"]["Input Dims"][0]) == 3 and e["args"]["Input Dims"][0][0] == 256]
    assert index
    for i in index[:4]:
        op = ops[i]
        source, dtype = op["args"]["Input Dims"][0], op["args"]["Input type"][0]
        n = next(d[0] for e in ops[i + 1:i + 17] for d in e["args"].get("Input Dims", [])
                 if isinstance(d, list) and len(d) == 3 and d[1:] == source[1:] and 0 < d[0] < 256)
        kernel = next(k for k in events if k.get("cat") == "kernel" and (c := launches.get(k["args"]["correlation"]))
                      and c["tid"] == op["tid"] and op["ts"] <= c["ts"] <= op["ts"] + op["dur"])
        row = kernels.filter(pl.col("correlation") == kernel["args"]["correlation"])
        assert row["bytes_moved"].item() == 2 * cost_cases._size([n, *source[1:]], dtype) + 8 * n
        assert row["cost_source"].item() == "estimated"


# ---------------------------------------------------------------- hand counts: the model's config, no shapes
def _module_gemms(path: Path) -> dict[tuple[str, str], float]:
    """FLOPs of the linear layers of every (phase range, module range) of a kernelscope trace, from its shapes."""
    events = cost_cases._events(path)
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    phases = [e for e in ranges if e["name"].startswith("ks.phase:")]
    modules = [e for e in ranges if e["name"].startswith("ks.module:model.layers.")]
    out: dict[tuple[str, str], float] = {}
    for op in (e for e in events if e["name"] == "aten::linear"):
        phase = cost_cases._innermost(phases, op["ts"])
        module = cost_cases._innermost(modules, op["ts"])
        if phase is None or module is None:
            continue
        x, w = op["args"]["Input Dims"][:2]
        m = 1
        for d in x[:-1]:
            m *= d
        key = (phase["name"], module["name"].removeprefix("ks.module:"))
        out[key] = out.get(key, 0.0) + 2.0 * m * w[0] * w[1]
    return out


def test_a_trace_without_shapes_is_costed_from_the_models_config(runs):
    """The same Qwen2 trace with its shapes removed, imported with the model's config.json, batch 1 and a 16-token
    prompt: every linear layer's FLOPs equal those of the shapes the original trace recorded, and attention's those
    of its causal pairs (prefill: 16·17/2 per head; decode step i: 17 + i keys)."""
    kernels = cost_cases._kernels(runs("shapeless-with-config"))
    assert not any("Input Dims" in e.get("args", {}) for e in cost_cases._events(cost_cases.QWEN_SHAPELESS))
    expected = _module_gemms(cost_cases.QWEN)
    assert len(expected) > 100
    config = json.loads(cost_cases.QWEN_CONFIG.read_text())
    phase_name = pl.when(pl.col("phase") == "prefill").then(pl.lit("ks.phase:prefill")).otherwise(
        pl.format("ks.phase:decode:{}", pl.col("step")))
    got = (kernels.filter(pl.col("gemm_m").is_not_null()).with_columns(phase_name.alias("_phase"))
           .group_by("_phase", "module").agg(pl.col("flops").sum()))
    got = {(p, m): f for p, m, f in got.iter_rows()}
    for key, flops in expected.items():
        assert got.get(key) == pytest.approx(flops), key
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    d = hidden // heads
    attention = kernels.filter((pl.col("category") == "attention") & (pl.col("layer") == 0))
    for phase, step, flops in attention.group_by("phase", "step").agg(pl.col("flops").sum()).iter_rows():
        pairs = 16 * 17 / 2 if phase == "prefill" else 17 + step
        assert flops == pytest.approx(2 * heads * 2 * d * pairs), (phase, step)
    assert set(kernels.filter(pl.col("cost_model").is_not_null())["cost_source"].unique().to_list()) <= {
        "model_config", "kernel_metadata", "estimated"}
    info = json.loads((runs("shapeless-with-config") / "run.json").read_text())
    assert info["model"]["config"]["hidden_size"] == hidden and info["workload"]["batch_size"] == 1


# ---------------------------------------------------------------- the GEMM shape table
def test_gemm_shape_table_in_both_reports_the_csv_and_query(tmp_path):
    out = tmp_path / "run"
    assert main(["-q", "import", str(cost_cases.SGLANG_DECODE), "--capture", str(cost_cases.SGLANG_CAPTURE), "--out", str(out),
                 "--figure-formats", "none"]) == 0
    captured = [op for _, op in cost_cases._captured_launches(cost_cases.SGLANG_CAPTURE) if op and op["name"] == "aten::mm"]
    shapes = {(op["args"]["Input Dims"][0][0], op["args"]["Input Dims"][1][1], op["args"]["Input Dims"][0][1])
              for op in captured}
    csv = pl.read_csv(out / "report" / "tables" / "gemm_shapes_decode.csv")
    assert set(zip(csv["m"], csv["n"], csv["k"], strict=True)) == shapes
    per_shape: dict[tuple[int, int, int], int] = {}
    for op in captured:
        (m, k), (_, n) = op["args"]["Input Dims"][:2]
        per_shape[(m, n, k)] = per_shape.get((m, n, k), 0) + 1  # each captured GEMM replays once
    for m, n, k, launches in csv.group_by("m", "n", "k").agg(pl.col("count").sum()).iter_rows():
        assert launches == per_shape[(m, n, k)]
    kernels = cost_cases._kernels(out).filter(pl.col("gemm_m").is_not_null())
    assert csv["flops"].sum() == pytest.approx(kernels["flops"].sum())
    assert csv["achieved_tflops"][0] == pytest.approx(csv["flops"][0] / (csv["total_ns"][0] / 1e9) / 1e12)
    report = (out / "report" / "report.md").read_text()
    section = report.split("## GEMM shapes")[1].split("\n## ")[0]
    first = csv.row(0, named=True)
    assert f"| {first['m']:,} | {first['n']:,} | {first['k']:,} |" in section
    assert "## GEMM 形状" in (out / "report" / "report.zh.md").read_text()
    query = tmp_path / "q.csv"
    assert main(["query", "select m, n, k, sum(launches) as launches from gemm_shapes group by all", str(out),
                 "--format", "csv", "--out", str(query)]) == 0
    rows = pl.read_csv(query)
    assert set(zip(rows["m"], rows["n"], rows["k"], strict=True)) == shapes


def test_a_grouped_gemm_s_arithmetic_is_its_gemm_kernel_s_not_its_setup_kernel_s(runs):
    """torch._grouped_mm launches a setup kernel (each group's sizes and pointers) and the grouped GEMM: on an H200
    the setup took a third of the op's time and, shared by duration, a third of its FLOPs (Nsight Compute measured
    none). Every FLOP of the op, 2·T·K·N from the file's Input Dims, is the GEMM kernel's."""
    path = cost_cases.KINETO / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"
    ops = [e for e in cost_cases._events(path) if e.get("cat") == "cpu_op" and e["name"] == "aten::_grouped_mm"]
    expected = 0
    for op in ops:
        (tokens, k), (_, k2, n) = op["args"]["Input Dims"][0], op["args"]["Input Dims"][1]
        assert k == k2
        expected += 2 * tokens * k * n
    kernels = cost_cases._kernels(runs("qwen3-moe-grouped-gemm")).filter(pl.col("op") == "aten::_grouped_mm")
    setup = kernels.filter(pl.col("name").str.contains("prepare_grouped_gemm_data"))
    gemm = kernels.filter(~pl.col("name").str.contains("prepare_grouped_gemm_data"))
    assert len(ops) == 4 and setup.height == gemm.height == len(ops)
    assert setup["flops"].sum() == 0
    assert gemm["flops"].sum() == pytest.approx(expected, rel=1e-9)
