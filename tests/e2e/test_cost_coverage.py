"""Every kernel costed: the share of device time with analytic FLOPs and bytes on real LLM-inference traces, and
the costs of a few kernels of each against counts made here by hand from the trace files themselves (plain json:
the op's recorded shapes, the capture trace's, the serving annotation's token sums, the model's config.json),
never from kernelscope's output.

Traces: the public TraceLens serving windows (SGLang decode with its capture trace, vLLM decode with full CUDA
graphs and vLLM prefill+decode with piecewise graphs with theirs, SGLang prefill+decode), our own HF captures
(generate with stacks, plain, a profiler-step loop, a replayed CUDA graph with its capture, two tensor-parallel
ranks), kernelscope's own H200 captures (Llama-3-8B, Qwen2, DeepSeek-V3 MoE, and its two expert-parallel ranks),
and one of those without its shapes, given the model's config.json."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

pytestmark = pytest.mark.slow  # each case imports a trace

DATA = Path(__file__).resolve().parents[1] / "data"
TRACELENS = DATA / "public" / "tracelens"
TRIMMED = DATA / "foreign" / "trimmed"
CAPTURED = DATA / "foreign" / "captured"
KINETO = DATA / "kineto"
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}
GRAPH_LAUNCH = {"cudaGraphLaunch", "hipGraphLaunch"}

SGLANG_DECODE = TRACELENS / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
SGLANG_CAPTURE = TRACELENS / "sglang_decode__capture_traces__bs_32_rank0.json.gz"
VLLM_FULL = TRACELENS / "inference__vllm_decode_full__graph_execution.json.gz"
VLLM_FULL_CAPTURE = TRIMMED / "vllm_decode_full__graph_capture_rank_0.json.gz"
VLLM_PIECEWISE = TRACELENS / "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz"
VLLM_PIECEWISE_CAPTURE = TRIMMED / "vllm_prefilldecode_piecewise__graph_capture_rank_0.json.gz"
SGLANG_PREFILL = TRACELENS / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
QWEN = KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
QWEN_SHAPELESS = KINETO / "h200-qwen2-0.5b-p16-n4.shapeless.trace.json.gz"
QWEN_CONFIG = DATA / "configs" / "qwen2-0.5b" / "config.json"

CASES = {
    "sglang-decode": [SGLANG_DECODE, "--capture", SGLANG_CAPTURE],
    "vllm-decode-full": [VLLM_FULL, "--capture", VLLM_FULL_CAPTURE],
    "vllm-piecewise": [VLLM_PIECEWISE, "--capture", VLLM_PIECEWISE_CAPTURE],
    "sglang-prefill-decode": [SGLANG_PREFILL],
    "hf-generate-stack": [CAPTURED / "hf_generate_stack.json.gz"],
    "hf-generate-plain": [CAPTURED / "hf_generate_plain.json.gz"],
    "hf-profiler-steps": [CAPTURED / "own_loop_profiler_steps.json.gz"],
    "hf-graph-replay": [CAPTURED / "graph_replay.json.gz", "--capture", CAPTURED / "graph_capture.json.gz"],
    "hf-tp2": [CAPTURED / "tp2_rank0.json.gz", CAPTURED / "tp2_rank1.json.gz"],
    "llama-3-8b": [KINETO / "h200-llama-3-8b-p16-n3.trace.json.gz"],
    "qwen2-0.5b": [QWEN],
    "qwen2-1.5b-b8": [KINETO / "h200-qwen2-1.5b-b8-p16-n3.trace.json.gz"],
    "deepseek-v3-moe": [KINETO / "h200-deepseek-v3-p16-n3.trace.json.gz"],
    "deepseek-v3-ep2": [DATA / "multi_gpu" / "deepseek_v3_ep2_rank0.json.gz",
                        DATA / "multi_gpu" / "deepseek_v3_ep2_rank1.json.gz"],
    "qwen3-moe-grouped-gemm": [KINETO / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"],
    "shapeless-with-config": [QWEN_SHAPELESS, "--model-config", QWEN_CONFIG, "--batch-size", "1",
                              "--prompt-len", "16"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made: dict[str, Path] = {}

    def run(case: str) -> Path:
        if case not in made:
            out = tmp_path_factory.mktemp(case) / "run"
            assert main(["-q", "import", *map(str, CASES[case]), "--out", str(out), "--no-report"]) == 0
            made[case] = out
        return made[case]

    return run


def _kernels(run: Path) -> pl.DataFrame:
    return pl.read_parquet(run / "kernels.parquet")


# ---------------------------------------------------------------- reading the files independently
@cache
def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _ops(events: list[dict]) -> dict[int, list[dict]]:
    by_tid: dict[int, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_tid.setdefault(e["tid"], []).append(e)
    return by_tid


def _innermost(ops: list[dict], ts: float, name: str | None = None) -> dict | None:
    best = None
    for o in ops:
        if o["ts"] <= ts <= o["ts"] + o["dur"] and (name is None or o["name"] == name) and (
                best is None or o["dur"] < best["dur"]):
            best = o
    return best


def _captured_launches(path: Path) -> list[tuple[dict, dict | None]]:
    """The capture trace's launch calls that ran nothing (captured), in order, each with the innermost CPU op
    open at the call on its thread."""
    events = _events(path)
    ran = {e["args"]["correlation"] for e in events if e.get("cat") in DEVICE}
    calls = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and re.search(r"LaunchKernel|MemsetAsync|MemcpyAsync", e["name"])
                    and e["args"].get("correlation") not in ran), key=lambda e: e["ts"])
    ops = _ops(events)
    return [(c, _innermost(ops.get(c["tid"], []), c["ts"])) for c in calls]


def _first_replay(path: Path) -> tuple[int, list[dict]]:
    """The first graph launch of a replay trace: its correlation id and its kernels in order."""
    events = _events(path)
    launch = min((e for e in events if e["name"] in GRAPH_LAUNCH), key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") in DEVICE
                      and e["args"].get("correlation") == launch["args"]["correlation"]), key=lambda e: e["ts"])
    return launch["args"]["correlation"], kernels


def _pairs(label: str) -> tuple[int, int, float]:
    """(query tokens, key/value tokens, causal query-key pairs) of a step from its execute annotation: per part
    (context, generation) sq = Σ query tokens, sk = Σ key tokens, sqsq = Σ sq², sqsk = Σ sq·sk; a sequence of sq
    queries ending its sk keys computes sq·sk − sq(sq − 1)/2 pairs."""
    parts = re.findall(r"\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)", label)
    assert len(parts) == 2, label
    q = sum(int(p[0]) for p in parts)
    kv = sum(int(p[1]) for p in parts)
    pairs = sum(int(p[3]) - (int(p[2]) - int(p[0])) / 2 for p in parts)
    return q, kv, pairs


def _annotation(path: Path) -> str:
    return next(e["name"] for e in _events(path) if e.get("cat") == "user_annotation"
                and e["name"].startswith("execute_"))


ELEMENT = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "unsigned char": 1, "long int": 8, "int": 4}


def _size(dims: list[int], dtype: str) -> int:
    n = ELEMENT[dtype]
    for d in dims:
        n *= d
    return n


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


# ---------------------------------------------------------------- hand counts: step annotations on eager ops
@pytest.mark.parametrize(("case", "path", "op_name"), [
    ("vllm-piecewise", VLLM_PIECEWISE, "vllm::unified_attention_with_output"),
    ("sglang-prefill-decode", SGLANG_PREFILL, "aiter::mha_batch_prefill"),
])
def test_eager_attention_of_an_annotated_step(runs, case, path, op_name):
    """vLLM's mixed step (9 prefill and 37 decode requests) and SGLang's prefill: the attention op's queries
    [T, Hq, D] and keys [·, Hkv, D] from its own shapes, the pairs and contexts from the step's annotation."""
    kernels = _kernels(runs(case))
    events = _events(path)
    ops = _ops(events)
    q_tokens, kv_tokens, pairs = _pairs(_annotation(path))
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    calls = [e for e in events if e["name"] == op_name]
    assert calls
    for call in calls[:3]:
        (_, heads, d), (*_, kv_heads, dk), (*_, dv) = call["args"]["Input Dims"][:3]
        mine = [k for k in events if k.get("cat") == "kernel" and (c := launches.get(k["args"]["correlation"]))
                and _innermost(ops.get(c["tid"], []), c["ts"], op_name) is call]
        assert mine
        rows = kernels.filter(pl.col("correlation").is_in([k["args"]["correlation"] for k in mine]))
        assert rows["flops"].sum() == pytest.approx(2 * heads * (d + dv) * pairs)
        assert rows["bytes_moved"].sum() == pytest.approx(2 * (q_tokens * heads * (d + dv) + kv_tokens * kv_heads * (dk + dv)))
        assert set(rows["cost_source"].to_list()) == {"step_annotation"}


# ---------------------------------------------------------------- hand counts: launch records, estimates
def test_nccl_kernels_cost_their_messages(runs):
    kernels = _kernels(runs("hf-tp2"))
    for rank, path in enumerate((CAPTURED / "tp2_rank0.json.gz", CAPTURED / "tp2_rank1.json.gz")):
        nccl = [e for e in _events(path) if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {})]
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
    kernels = _kernels(runs("deepseek-v3-moe"))
    events = _events(KINETO / "h200-deepseek-v3-p16-n3.trace.json.gz")
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
        assert row["bytes_moved"].item() == 2 * _size([n, *source[1:]], dtype) + 8 * n
        assert row["cost_source"].item() == "estimated"


# ---------------------------------------------------------------- hand counts: the model's config, no shapes
def _module_gemms(path: Path) -> dict[tuple[str, str], float]:
    """FLOPs of the linear layers of every (phase range, module range) of a kernelscope trace, from its shapes."""
    events = _events(path)
    ranges = [e for e in events if e.get("cat") == "user_annotation"]
    phases = [e for e in ranges if e["name"].startswith("ks.phase:")]
    modules = [e for e in ranges if e["name"].startswith("ks.module:model.layers.")]
    out: dict[tuple[str, str], float] = {}
    for op in (e for e in events if e["name"] == "aten::linear"):
        phase = _innermost(phases, op["ts"])
        module = _innermost(modules, op["ts"])
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
    kernels = _kernels(runs("shapeless-with-config"))
    assert not any("Input Dims" in e.get("args", {}) for e in _events(QWEN_SHAPELESS))
    expected = _module_gemms(QWEN)
    assert len(expected) > 100
    config = json.loads(QWEN_CONFIG.read_text())
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
    assert main(["-q", "import", str(SGLANG_DECODE), "--capture", str(SGLANG_CAPTURE), "--out", str(out),
                 "--figure-formats", "none"]) == 0
    captured = [op for _, op in _captured_launches(SGLANG_CAPTURE) if op and op["name"] == "aten::mm"]
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
    kernels = _kernels(out).filter(pl.col("gemm_m").is_not_null())
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
    path = KINETO / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"
    ops = [e for e in _events(path) if e.get("cat") == "cpu_op" and e["name"] == "aten::_grouped_mm"]
    expected = 0
    for op in ops:
        (tokens, k), (_, k2, n) = op["args"]["Input Dims"][0], op["args"]["Input Dims"][1]
        assert k == k2
        expected += 2 * tokens * k * n
    kernels = _kernels(runs("qwen3-moe-grouped-gemm")).filter(pl.col("op") == "aten::_grouped_mm")
    setup = kernels.filter(pl.col("name").str.contains("prepare_grouped_gemm_data"))
    gemm = kernels.filter(~pl.col("name").str.contains("prepare_grouped_gemm_data"))
    assert len(ops) == 4 and setup.height == gemm.height == len(ops)
    assert setup["flops"].sum() == 0
    assert gemm["flops"].sum() == pytest.approx(expected, rel=1e-9)
