"""Profiling the engine: declared kernel costs and attribution of CUDA-graph replays."""

import re
from pathlib import Path

import polars as pl
import pytest

from kernelscope import engine_costs, ranges
from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.attribution.graph_replays import attribute_graph_replays
from kernelscope.analyze.costs.catalog import classify
from kernelscope.analyze.costs.kernel_costs import DECLARED_MODEL, kernel_costs
from kernelscope.load.kineto import load_kineto
from tests.conftest import KINETO, write_trace

GEMV = engine_costs.cost_range_name("ks_gemv_splitk", 2 * 1536 * 8960, 27_540_000, "bf16")
NORM = engine_costs.cost_range_name("ks_add_rms_norm", 4 * 1536, 4 * 1536 * 2, "fp32")


def _annotation(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _launch(name, ts, correlation, kernel_ts, kernel_dur, api="cuLaunchKernelEx"):
    return [
        {"ph": "X", "cat": "cuda_driver", "name": api, "pid": 1, "tid": 1, "ts": ts, "dur": 2,
         "args": {"correlation": correlation}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": kernel_ts, "dur": kernel_dur,
         "args": {"correlation": correlation, "device": 0, "stream": 7}},
    ]


def test_cost_prefix_is_the_one_the_engine_writes():
    assert ranges.COST_PREFIX == engine_costs.PREFIX
    assert engine_costs.parse_cost_range(GEMV) == ("ks_gemv_splitk", 2 * 1536 * 8960, 27_540_000, "bf16")


def test_declared_range_is_the_kernels_op_and_its_exact_cost(tmp_path):
    events = [
        _annotation("ks.phase:decode:0", 0, 100),
        _annotation("ks.module:model.layers.0.mlp", 1, 98),
        _annotation(GEMV, 10, 5), *_launch("ks_gemv_splitk_kernel", 11, 1, 200, 40),
        _annotation(NORM, 20, 5), *_launch("ks_add_rms_norm_kernel", 21, 2, 250, 3),
        *_launch("other_kernel", 40, 3, 260, 3),  # launched outside any declaration: no declared cost
    ]
    kernels, ops = attribute(load_kineto(write_trace(tmp_path / "t.json", events)))
    assert kernels["op"].to_list() == [GEMV, NORM, None]
    assert kernels["top_op"].to_list() == [GEMV, NORM, None]
    costed = kernel_costs(kernels, ops)
    gemv, norm, other = costed.iter_rows(named=True)
    assert (gemv["flops"], gemv["bytes_moved"], gemv["precision"]) == (2 * 1536 * 8960, 27_540_000, "bf16")
    assert gemv["cost_model"] == DECLARED_MODEL and gemv["cost_op_id"] == gemv["op_id"]
    assert (norm["flops"], norm["bytes_moved"], norm["precision"]) == (4 * 1536, 4 * 1536 * 2, "fp32")
    assert other["cost_model"] is None and other["flops"] is None


def test_declared_cost_is_split_over_the_cpu_ops_it_encloses(tmp_path):
    """The engine's torch backend on CPU: one declaration around several framework ops, which are the kernels."""
    events = [
        _annotation("ks.phase:prefill", 0, 100),
        _annotation(GEMV, 10, 60),
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 20, "dur": 30},
    ]
    kernels, ops = attribute(load_kineto(write_trace(tmp_path / "cpu.json", events)))
    costed = kernel_costs(kernels, ops)
    assert set(costed["op"]) == {GEMV} and set(costed["cost_model"]) == {DECLARED_MODEL}
    assert costed["flops"].sum() == pytest.approx(2 * 1536 * 8960)
    assert costed["bytes_moved"].sum() == pytest.approx(27_540_000)
    by_name = dict(zip(costed["name"], costed["flops"], strict=True))  # self times 20 µs and 30 µs
    assert by_name["aten::addmm"] == pytest.approx(0.6 * 2 * 1536 * 8960)


def test_graph_replays_of_a_real_trace_take_the_eager_steps_attribution():
    """H100, torch 2.11: an eager decode step with module ranges, then three replays of its captured graph."""
    kernels, _ = attribute(load_kineto(KINETO / "cuda_graph_replay.json.gz"))
    graph = pl.col("launch_api") == "cudaGraphLaunch"
    assert kernels.filter(graph)["module"].null_count() == 21  # the trace alone gives them no module
    attributed, info = attribute_graph_replays(kernels)
    assert (info.replays, info.kernels, info.attributed_replays, info.attributed_kernels) == (3, 21, 3, 21)
    assert info.unattributed == []
    eager = attributed.filter(~graph & (pl.col("step") == 0))
    for step in (1, 2, 3):
        replay = attributed.filter(graph & (pl.col("step") == step))
        assert replay["name"].to_list() == eager["name"].to_list()
        for column in ("module", "layer", "op", "top_op"):
            assert replay[column].to_list() == eager[column].to_list(), column
        assert replay["op_id"].null_count() == replay.height  # not the eager op's CPU event
    assert attributed.columns == kernels.columns
    assert attributed.drop("module", "layer", "op", "top_op").equals(kernels.drop("module", "layer", "op", "top_op"))


def _synthetic(graph_names: list[str], eager_names: list[str]) -> pl.DataFrame:
    """One eager decode step (step 0, with modules and declared ops) and one replay (step 1)."""
    rows = [
        {"name": name, "launch_api": "cuLaunchKernelEx", "correlation": i, "phase": "decode", "step": 0,
         "module": f"model.layers.{i}.mlp", "layer": i, "op": GEMV, "top_op": GEMV, "op_id": 10 + i}
        for i, name in enumerate(eager_names)
    ] + [
        {"name": name, "launch_api": "cudaGraphLaunch", "correlation": 99, "phase": "decode", "step": 1,
         "module": None, "layer": None, "op": None, "top_op": None, "op_id": None}
        for name in graph_names
    ]
    frame = pl.DataFrame(rows, schema_overrides={"module": pl.String, "op": pl.String, "top_op": pl.String,
                                                 "layer": pl.Int64, "op_id": pl.Int64})
    return frame.with_row_index("kernel_id").with_columns(
        pl.col("kernel_id").cast(pl.Int64), pl.col("kernel_id").alias("start_ns"), pl.lit(1000).alias("dur_ns"),
        pl.lit("kernel").alias("kind"), pl.lit(None, dtype=pl.Int64).alias("generation"),
        pl.lit(None, dtype=pl.Int64).alias("bytes"))


def test_replay_within_a_longer_eager_step_is_matched():
    # The eager step also copies the new token out after the graph's part.
    attributed, info = attribute_graph_replays(_synthetic(["ks_a", "ks_b"], ["ks_a", "ks_b", "ks_copy"]))
    replay = attributed.filter(pl.col("step") == 1)
    assert replay["module"].to_list() == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert info.attributed_kernels == 2 and info.unattributed == []
    ops = pl.DataFrame({"op_id": range(16), "name": [GEMV] * 16, "cat": ["annotation"] * 16}).with_columns(
        pl.col("op_id").cast(pl.Int64), *(pl.lit(None, dtype=pl.String).alias(c) for c in
                                          ("input_dims", "input_types", "concrete_inputs")),
        pl.lit(None, dtype=pl.Int64).alias("parent_op_id"))
    costed = kernel_costs(attributed, ops)
    assert costed.filter(pl.col("step") == 1)["flops"].to_list() == [2 * 1536 * 8960] * 2


def test_mismatched_replay_stays_unattributed_with_the_reason():
    kernels = _synthetic(["ks_a", "ks_x"], ["ks_a", "ks_b"])
    attributed, info = attribute_graph_replays(kernels)
    assert attributed.equals(kernels)
    assert info.attributed_kernels == 0
    [entry] = info.unattributed
    assert entry.replays == 1 and entry.kernels == 2
    assert "appear in order in no eager step" in entry.reason
    assert "kernel 1: 'ks_x' in the replay, 'ks_b' in the step" in entry.reason
    # The same reason as data, for the report to word in each language.
    assert (entry.kernels_per_replay, entry.captures_given, entry.closest_capture_share, entry.eager_steps) == (
        2, False, None, True)
    assert (entry.step, entry.kernel, entry.replay_kernel, entry.step_kernel) == (0, 1, "ks_x", "ks_b")


def test_a_replay_longer_than_the_step_departs_where_the_step_ends():
    _, info = attribute_graph_replays(_synthetic(["ks_a", "ks_b", "ks_c"], ["ks_a", "ks_b"]))
    [entry] = info.unattributed
    assert (entry.step, entry.kernel, entry.replay_kernel, entry.step_kernel) == (0, 2, "ks_c", None)
    assert "kernel 2: 'ks_c' in the replay, '(none)' in the step" in entry.reason


def test_replays_without_an_eager_step_and_runs_without_graphs():
    kernels = _synthetic(["ks_a"], []).with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    _, info = attribute_graph_replays(kernels)
    assert "no eager step with modules to copy from" in info.unattributed[0].reason
    assert info.unattributed[0].eager_steps is False and info.unattributed[0].step is None
    eager_only = _synthetic([], ["ks_a"])
    assert attribute_graph_replays(eager_only) == (eager_only, None)


def _engine_kernel_names() -> list[str]:
    root = Path(engine_costs.__file__).parent / "engine" / "kernels"
    return sorted({m.group(1) for f in root.glob("*.py")
                   for m in re.finditer(r"@triton\.jit[^\n]*\n\s*def (ks_\w+)", f.read_text())})


def test_every_engine_kernel_has_a_catalog_entry():
    names = _engine_kernel_names()
    assert len(names) >= 10
    for name in names:
        info = classify(name)
        assert info.library == "kernelscope engine", name
        assert info.category != "other" and info.friendly_name.startswith("Engine "), (name, info)
    assert classify("ks_attn_decode_combine").category == "attention-combine"
    assert classify("ks_gemv_qkv").category == "GEMV"
