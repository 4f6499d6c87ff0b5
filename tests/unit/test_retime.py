"""Re-timing the dependency graph (analyze/paths/retime, `whatif --speedup`) on real traces, where the answer is known by
construction: nothing changed keeps every time exactly; work off every step's path changes no step; a device-bound
step whose kernels all get twice as fast loses half its device work on the path; a launch-bound step barely
moves when its kernels get faster, though their device time says otherwise."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kernelscope.analyze.paths.retime import Speedup, retime, speedup_factors
from kernelscope.analyze.paths.speedup import speedup_study
from tests.unit.test_critical_path import critical_path_of

LAUNCH_BOUND = ("kineto/h200-qwen2-0.5b-p16-n4.trace.json.gz",)  # HF eager decode under the profiler
DEVICE_BOUND = ("public/tracelens/traces__torch_compile_triton__trace.json.gz",)  # Inductor kernels back to back
SEVERAL_RANKS = ("multi_gpu/deepseek_v3_ep2_rank0.json.gz", "multi_gpu/deepseek_v3_ep2_rank1.json.gz")


@pytest.mark.parametrize("files", [LAUNCH_BOUND, DEVICE_BOUND, SEVERAL_RANKS,
                                   ("public/tracelens/inference__vllm_decode_full__graph_execution.json.gz",),
                                   ("foreign/captured/tp2_rank0.json.gz", "foreign/captured/tp2_rank1.json.gz")],
                         ids=lambda f: f[0].split("/")[-1][:40])
def test_nothing_changed_keeps_every_time(files):
    graph = critical_path_of(files).graph
    same = retime(graph, speedup_factors(graph, [Speedup("compute", 1.0)]))
    assert np.array_equal(same.start, graph.start) and np.array_equal(same.end, graph.end)


def test_work_off_every_path_changes_no_step():
    measured = critical_path_of(LAUNCH_BOUND)
    on_path = set(measured.segments.filter(pl.col("class") == "compute")["name"].drop_nulls().to_list())
    off = (measured.graph.devices.filter(~pl.col("name").is_in(sorted(on_path)))
           .group_by("name").len().sort("len", "name", descending=[True, False]))
    assert off.height
    name = off["name"][0]  # the most launched kernel the path never runs through
    study = speedup_study(measured, [Speedup(name, 2.0)])
    assert study.matched[name] == off["len"][0]
    assert (study.steps["saved_ns"] == 0).all()
    assert (study.steps["sum_saved_ns"] > 0).all()  # adding up its device time would have claimed a saving


def test_a_device_bound_step_loses_half_its_device_work_when_every_kernel_is_twice_as_fast():
    measured = critical_path_of(DEVICE_BOUND)
    step = measured.steps.row(0, named=True)
    assert step["compute_ns"] > 0.95 * step["step_ns"]  # the device decides it
    study = speedup_study(measured, [Speedup("compute", 2.0)])
    saved = study.steps["saved_ns"][0]
    assert saved == pytest.approx(step["compute_ns"] / 2, rel=0.01)
    # The new path still runs through the kernels, now half as long.
    new = study.path.steps.row(0, named=True)
    assert new["compute_ns"] == pytest.approx(step["compute_ns"] / 2, rel=0.01)


def test_a_launch_bound_step_is_decided_by_the_host():
    measured = critical_path_of(LAUNCH_BOUND)
    decode = measured.steps.filter(pl.col("phase") == "decode")
    faster_kernels = speedup_study(measured, [Speedup("compute", 2.0)]).steps.filter(pl.col("phase") == "decode")
    # Half the kernels' time would be a few percent of the step added up, and is almost nothing through the graph.
    assert (faster_kernels["sum_saved_pct"] > 1.0).all()
    assert (faster_kernels["saved_pct"].abs() < 0.1).all()
    # The host's launches and the rest of its time twice as fast: the steps, decided by them, take half as long.
    host = speedup_study(measured, [Speedup("launch", 2.0), Speedup("host", 2.0)]).steps.filter(
        pl.col("phase") == "decode")
    host_share = (decode["launch_ns"] + decode["host_ns"]) / decode["step_ns"]
    assert ((host["saved_ns"] / decode["step_ns"] - host_share / 2).abs() < 0.01).all()


def test_a_target_that_names_nothing_is_refused():
    graph = critical_path_of(LAUNCH_BOUND).graph
    with pytest.raises(ValueError, match="names no kernel"):
        speedup_factors(graph, [Speedup("no such kernel", 2.0)])


def test_modules_match_with_their_submodules_and_patterns():
    graph = critical_path_of(LAUNCH_BOUND).graph
    modules = graph.devices["module"].drop_nulls()
    layer = modules.filter((modules == "model.layers.3") | modules.str.starts_with("model.layers.3."))
    assert layer.len()
    assert speedup_factors(graph, [Speedup("model.layers.3", 2.0)]).matched["model.layers.3"] == layer.len()
    every = modules.filter(modules.str.contains(r"^model\.layers\.\d+\.mlp\.down_proj$")).len()
    assert speedup_factors(graph, [Speedup("model.layers.*.mlp.down_proj", 2.0)]).matched[
        "model.layers.*.mlp.down_proj"] == every
