"""Comparison of runs: real H200 and H100 runs of one workload, and small constructed runs for the matching
rules (one job done by different kernels, different models, a missing phase)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.comparison.compare import compare, prepare
from kernelscope.analyze.comparison.run_views import col, delta_col, ratio_col
from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.load.rundir import read_run, read_summary

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
H200, H100 = RUNS / "h200-qwen2-0.5b-ncu", RUNS / "h100-qwen2-0.5b-ncu"


def _view(label: str, path: Path):
    return prepare(label, read_run(path), read_summary(path))


@pytest.fixture(scope="module")
def gpus():
    return compare([_view("h200", H200), _view("h100", H100)])


def test_phase_times_per_step_are_the_runs_own(gpus):
    for label, path in (("h200", H200), ("h100", H100)):
        summary = json.loads((path / "summary.json").read_text())
        for phase, figures in summary["phases"].items():
            row = gpus.phases.filter(pl.col("phase") == phase).row(0, named=True)
            assert row[col("device_time_per_step_ns", label)] == pytest.approx(figures["device_time_per_step_us"] * 1e3)
            assert row[col("steps", label)] == figures["steps"]
    decode = gpus.phases.filter(pl.col("phase") == "decode").row(0, named=True)
    expected = decode[col("device_time_per_step_ns", "h100")] / decode[col("device_time_per_step_ns", "h200")]
    assert decode[ratio_col("h100", "h200")] == pytest.approx(expected)


def test_matched_rows_account_for_every_kernel_once(gpus):
    # Summed over matched rows, per-step time equals the phase's per-step device time in each run.
    for phase in ("prefill", "decode"):
        rows = gpus.matched.filter(pl.col("phase") == phase)
        totals = gpus.phases.filter(pl.col("phase") == phase).row(0, named=True)
        for label in ("h200", "h100"):
            assert rows[col("per_step_ns", label)].sum() == pytest.approx(totals[col("device_time_per_step_ns", label)])
    # Same model, same software: every job is done in both runs ...
    assert gpus.matched.filter(pl.col(col("kernels", "h200")).is_null() | pl.col(col("kernels", "h100")).is_null()).height == 0
    assert not gpus.notes
    # ... by the same kernels, except where cuBLASLt's heuristics chose another GEMM tile for the other GPU.
    differing = gpus.matched.filter(pl.col(col("kernels", "h200")) != pl.col(col("kernels", "h100")))
    assert set(differing["group"]) <= {"GEMM/GEMV"}


def test_layers_are_per_layer_per_step(gpus):
    run = read_run(H200)
    kernels = run.kernels.filter((pl.col("phase") == "decode") & pl.col("module").str.ends_with("mlp.down_proj"))
    steps = kernels["step"].n_unique()
    layers = kernels["layer"].n_unique()
    row = gpus.layers.filter((pl.col("phase") == "decode") & (pl.col("layer_module") == "mlp.down_proj")).row(0, named=True)
    assert row[col("per_layer_step_ns", "h200")] == pytest.approx(kernels["dur_ns"].sum() / (steps * layers))
    assert row[col("launches_per_layer_step", "h200")] == pytest.approx(kernels.height / (steps * layers))


def test_what_changed_most_is_ordered_by_size_and_the_lm_head_gemv_is_slower_on_h100(gpus):
    decode = gpus.changes.filter(pl.col("phase") == "decode")
    sizes = decode["delta_ns"].abs().to_list()
    assert sizes == sorted(sizes, reverse=True) and len(sizes) >= 1
    # The batch-1 LM head reads 272 MB of weights per step: bound by memory bandwidth, which the H100 has less of.
    lm_head = gpus.matched.filter((pl.col("phase") == "decode") & (pl.col("match_module") == "lm_head")
                                  & (pl.col("group") == "GEMM/GEMV")).row(0, named=True)
    assert lm_head[ratio_col("h100", "h200")] > 1.2
    assert lm_head[delta_col("h100", "h200")] > 0


def _run(label: str, rows: list[tuple[str, str, str | None, int | None, str, int]], model: str = "m",
         layer_type: str | None = None) -> object:
    """A run from (phase, module, top_op, step, kernel name, duration ns) rows, one launch each."""
    start = 0
    records = []
    for phase, module, top_op, step, name, dur in rows:
        layer = next((int(p) for p in module.split(".") if p.isdigit()), None) if module else None
        records.append({"name": name, "kind": "kernel", "device": 0, "stream": 7, "start_ns": start, "dur_ns": dur,
                        "phase": phase, "step": step, "module": module, "layer": layer, "op": top_op,
                        "top_op": top_op, "launch_dur_ns": 2000, "flops": None, "bytes_moved": None})
        start += dur + 1000
    kernels = with_kernel_catalog(pl.DataFrame(records, schema_overrides={
        "module": pl.String, "top_op": pl.String, "op": pl.String, "step": pl.Int64, "layer": pl.Int64,
        "flops": pl.Float64, "bytes_moved": pl.Float64}))
    run = {"source": "profile", "schema_version": 1, "workload": {"model": model, "batch_size": 1, "prompt_len": 16},
           "hardware": {"name": "GPU"}}
    if layer_type:
        run["model"] = {"layer_types": {"0": layer_type}}
    summary = Summary(kernel_count=kernels.height, device_time_us=kernels["dur_ns"].sum() / 1e3)
    info = RunInfo.from_json(json.dumps(run))
    return prepare(label, Run(kernels=kernels, ops=pl.DataFrame(), info=info), summary)


NVJET = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
GEMVX = ("void gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, false, true, true, false, 7, "
         "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
         "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >"
         "(T13, T5, T5)")
TRITON_GEMV = "_gemv_kernel"


def test_one_job_done_by_different_kernels_is_one_row():
    rows = lambda name, dur: [("decode", f"model.layers.{i}.mlp.down_proj", "aten::linear", s, name, dur)  # noqa: E731
                              for s in range(2) for i in range(2)]
    c = compare([_run("nvjet", rows(NVJET, 5000)), _run("gemvx", rows(GEMVX, 4000)),
                 _run("triton", rows(TRITON_GEMV, 3000))])
    down = c.matched.filter(pl.col("match_module") == "mlp.down_proj")
    assert down.height == 1
    row = down.row(0, named=True)
    assert row["group"] == "GEMM/GEMV"
    assert row[col("per_step_ns", "nvjet")] == 10000 and row[col("per_step_ns", "triton")] == 6000
    assert row[ratio_col("triton", "nvjet")] == pytest.approx(0.6)
    assert "cuBLASLt" in row[col("kernels", "nvjet")] and "GEMV" in row[col("kernels", "gemvx")]
    layer_row = c.layers.filter(pl.col("layer_module") == "mlp.down_proj").row(0, named=True)
    assert layer_row[col("per_layer_step_ns", "gemvx")] == 4000  # one launch per layer per step


def test_different_models_align_their_layer_types_and_say_so():
    a = _run("qwen", [("decode", "model.layers.0.mlp.down_proj", "aten::linear", 0, NVJET, 5000)], model="qwen2",
             layer_type="Qwen2DecoderLayer")
    b = _run("llama", [("decode", "model.layers.0.mlp.down_proj", "aten::linear", 0, NVJET, 7000)], model="llama",
             layer_type="LlamaDecoderLayer")
    c = compare([a, b])
    keys = {n.key for n in c.notes}
    assert {"models_differ", "layer_types_aligned"} <= keys
    row = c.layers.filter(pl.col("layer_module") == "mlp.down_proj").row(0, named=True)
    assert row["layer_type"] == "decoder layer"
    assert row[col("per_layer_step_ns", "llama")] == 7000 and row[col("per_layer_step_ns", "qwen")] == 5000


def test_a_missing_phase_is_not_available_not_zero():
    both = [("prefill", "model.layers.0.mlp.down_proj", "aten::linear", None, NVJET, 9000),
            ("decode", "model.layers.0.mlp.down_proj", "aten::linear", 0, NVJET, 5000)]
    c = compare([_run("full", both), _run("prefill-only", both[:1])])
    decode = c.phases.filter(pl.col("phase") == "decode").row(0, named=True)
    assert decode[col("device_time_per_step_ns", "prefill-only")] is None
    assert decode[ratio_col("prefill-only", "full")] is None
    matched = c.matched.filter(pl.col("phase") == "decode").row(0, named=True)
    assert matched[col("per_step_ns", "prefill-only")] is None
    assert any(n.key == "phase_missing" and n.values["runs"] == "prefill-only" for n in c.notes)
    # A job one run does not do, in a phase it ran, took no time there.
    extra = _run("extra", both + [("decode", "model.layers.0.mlp.act_fn", "aten::silu", 0,
                                   "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>()", 800)])
    c2 = compare([_run("full", both), extra])
    act = c2.matched.filter(pl.col("match_module") == "mlp.act_fn").row(0, named=True)
    assert act[col("per_step_ns", "full")] == 0 and act[col("per_step_ns", "extra")] == 800


def test_kernels_without_modules_match_by_framework_op():
    a = _run("a", [("decode", None, "aten::linear", 0, NVJET, 5000)])
    b = _run("b", [("decode", None, "aten::linear", 0, GEMVX, 4000)])
    c = compare([a, b])
    assert c.matched["match_module"].to_list() == ["op aten::linear"]
    assert c.layers.height == 0
    assert any(n.key == "no_modules" for n in c.notes)
