"""The what-if projection: arithmetic on synthetic kernels with known answers, the fit recovering known factors,
parsing of targets, and the calibration of the shipped model on committed device runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.projection.projection import (
    GroupFactors,
    Options,
    ProjectionModel,
    Target,
    default_model,
    group_projection,
    merge_alike,
    phase_projection,
    phase_times,
    project,
    projection_inputs,
    requirement,
    sweep,
    target_from_ceilings,
)
from kernelscope.analyze.projection.projection_fit import FitRun, calibration_table, fit_factors
from kernelscope.analyze.projection.whatif import what_if
from kernelscope.contracts.tables import conform_kernels
from kernelscope.errors import UserError
from kernelscope.load.rundir import read_run
from kernelscope.load.whatif_inputs import parse_settings, parse_sweep, read_spec_file
from kernelscope.pipeline import run_ceilings

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"

MODEL = ProjectionModel(
    groups={"GEMM": "matmul", "elementwise": "elementwise"},
    factors={"matmul": GroupFactors(1000.0, 0.5, 0.5), "elementwise": GroupFactors(500.0, 1.0, 1.0),
             "other": GroupFactors(2000.0, 1.0, 1.0)},
    fusable=("elementwise",), weight_bound=("matmul",), onchip_bandwidth_ratio=10.0,
)
TARGET = Target(name="T", bandwidth=1e12, flops={"bf16": 1e15}, l2_bytes=50e6)


def _kernels(rows: list[dict]) -> pl.DataFrame:
    base = {"name": "k", "kind": "kernel", "phase": "decode", "step": 0, "dur_ns": 10_000, "flops": None,
            "bytes_moved": None, "precision": "bf16", "category": "GEMM", "grid_x": 1, "grid_y": 1, "grid_z": 1,
            "block_x": 1, "block_y": 1, "block_z": 1}
    frame = pl.DataFrame([base | r for r in rows], schema_overrides={"flops": pl.Float64, "bytes_moved": pl.Float64})
    return projection_inputs(conform_kernels(frame), None, MODEL)


def test_memory_compute_latency_and_carried_kernels():
    k = _kernels([
        {"name": "mem", "bytes_moved": 1e9, "flops": 1e9},  # 1000 + 1e9 / (1e12 · 0.5) s = 2 ms
        {"name": "cmp", "bytes_moved": 1e6, "flops": 1e12},  # 1000 + 1e12 / (1e15 · 0.5) s = 2 ms
        {"name": "tiny", "category": "elementwise", "bytes_moved": 1e3},  # 500 + 1 ns
        {"name": "none", "category": "sampling", "dur_ns": 7777},  # no model: measured time
    ])
    p = project(k, TARGET, MODEL).sort("name")
    got = dict(zip(p["name"], p["projected_ns"], strict=True))
    assert got["mem"] == pytest.approx(1000 + 2e6)
    assert got["cmp"] == pytest.approx(1000 + 2e6)
    assert got["tiny"] == pytest.approx(501)
    assert got["none"] == 7777
    assert dict(zip(p["name"], p["bound"], strict=True)) == {"cmp": "compute", "mem": "memory", "none": "carried",
                                                             "tiny": "latency"}


def test_design_options():
    rows = [{"name": "w", "bytes_moved": 2e9, "step": s} for s in range(2)]
    rows += [{"name": "e", "category": "elementwise", "bytes_moved": 1e6, "step": s} for s in range(2)]
    k = _kernels(rows)
    plain = project(k, TARGET, MODEL)
    assert plain.filter(pl.col("name") == "w")["projected_ns"][0] == pytest.approx(1000 + 4e6)
    # Fusion folds element-wise kernels away; 8-bit weights halve the matrix products' bytes.
    fused = project(k, TARGET, MODEL, Options(fuse=True, weight_bits=8))
    assert fused.filter(pl.col("name") == "e")["projected_ns"].sum() == 0
    assert fused.filter(pl.col("name") == "w")["projected_ns"][0] == pytest.approx(1000 + 2e6)
    # 1 GB of added SRAM holds half of the 2 GB a decode step re-reads, served 10× faster.
    sram = project(k, TARGET.changed(sram_bytes=1e9), MODEL, source_l2_bytes=50e6)
    assert sram.filter(pl.col("name") == "w")["projected_ns"][0] == pytest.approx(1000 + 2e6 + 2e6 / 10)
    # A larger L2 than the measuring device's adds its difference.
    l2 = project(k, TARGET.changed(l2_bytes=1.05e9), MODEL, source_l2_bytes=50e6)
    assert l2.filter(pl.col("name") == "w")["projected_ns"][0] == pytest.approx(1000 + 2e6 + 2e6 / 10)
    # The per-kernel latency scales.
    fast = project(k, TARGET.changed(latency_scale=0.25), MODEL)
    assert fast.filter(pl.col("name") == "e")["projected_ns"][0] == pytest.approx(125 + 1e6 / 1e12 * 1e9)


def test_phase_table_is_per_step():
    k = _kernels([{"name": "w", "bytes_moved": 1e9, "step": s, "dur_ns": 3_000_000} for s in range(4)])
    table = phase_projection(project(k, TARGET, MODEL))
    row = table.row(0, named=True)
    assert row["steps"] == 4 and row["measured_per_step_ns"] == 3_000_000
    assert row["projected_per_step_ns"] == pytest.approx(1000 + 2e6)
    assert row["ratio"] == pytest.approx((1000 + 2e6) / 3e6)


def test_requirement_inverts_the_model():
    # time = 1000 ns + B / (bw · 0.5): for a goal G the bandwidth needed is B / (0.5 (G − 1000)); the floor is 1000.
    k = _kernels([{"name": "w", "bytes_moved": 1e9}])
    needed, floor = requirement(k, TARGET, MODEL, Options(), "decode", 1_001_000.0, "bandwidth", None)
    assert floor == pytest.approx(1000, rel=1e-3)
    assert needed == pytest.approx(1e9 / (0.5 * 1e-3), rel=2e-3)
    unreachable, _ = requirement(k, TARGET, MODEL, Options(), "decode", 500.0, "bandwidth", None)
    assert unreachable is None


def test_sweep_rows():
    k = _kernels([{"name": "w", "bytes_moved": 1e9}])
    rows = sweep(k, TARGET, MODEL, Options(), "bandwidth", [1e12, 2e12, 4e12], None)
    assert rows["value"].to_list() == [1e12, 2e12, 4e12]
    assert rows["projected_per_step_ns"].to_list() == pytest.approx([1000 + 2e6, 1000 + 1e6, 1000 + 5e5])


@pytest.mark.parametrize("options", [Options(), Options(fuse=True, weight_bits=4)])
def test_merged_rows_project_as_the_rows_themselves(options):
    """Scenarios, requirements and sweeps project merged rows (merge_alike): per phase and kind of work the time
    per step and what bounds it are those of projecting every launch, here on a real run with a target that holds
    more on chip (the decode step's re-read bytes divide by its steps)."""
    run = with_costs_and_names(read_run(RUNS / "h100-qwen2-1.5b-b8-slim"))
    model = default_model()
    inputs = projection_inputs(run.kernels, run.ncu, model)
    target = target_from_ceilings(run_ceilings(run.info), model).changed(sram_bytes=32e6)
    alike = merge_alike(inputs)
    assert alike.rows.height < inputs.height / 20
    every = project(inputs, target, model, options, 50e6)
    per_phase = every.group_by("phase").agg(pl.col("projected_ns").sum())
    steps = {row["phase"]: row["steps"] for row in phase_projection(every).iter_rows(named=True)}
    expected = {phase: total / steps[phase] for phase, total in per_phase.iter_rows()}
    assert phase_times(alike, target, model, options, 50e6) == pytest.approx(expected, rel=1e-9)
    merged = project(alike.rows, target, model, options, 50e6, alike.steps)
    key = ["phase", "group"]
    by_group = group_projection(every).sort(key)
    assert_frame_equal(group_projection(merged, alike.steps).sort(key), by_group, check_exact=False, rel_tol=1e-9)


@pytest.mark.parametrize("options", [Options(), Options(fuse=True, weight_bits=4)])
def test_what_if_tables_are_those_of_every_launch(options):
    """what_if projects one row per kernel name and launches that project alike (merge_kernel_launches); its
    per-kernel table must be what projecting every launch gives: time per step summed launch by launch, and the
    bound most launches of the name have (ties: the first by name), on a real run."""
    run = with_costs_and_names(read_run(RUNS / "h100-qwen2-1.5b-b8-slim"))
    model = default_model()
    inputs = projection_inputs(run.kernels, run.ncu, model)
    source = target_from_ceilings(run_ceilings(run.info), model)
    target = source.changed(sram_bytes=32e6)
    study = what_if(inputs, source, target, model, options, 50e6, run.info, sweeps=[])
    # The study's target: with the run's own per-kernel latency where the model is fitted so (with_run_latency).
    every = project(inputs, study.target, model, options, 50e6)
    steps = dict(phase_projection(every).select("phase", "steps").iter_rows())
    expected: dict[tuple[str, str], tuple[float, str]] = {}
    for (phase, name), launches in every.group_by("phase", "name"):
        counts: dict[str, int] = {}
        for bound in launches["bound"].to_list():
            counts[bound] = counts.get(bound, 0) + 1
        most = min(counts, key=lambda bound: (-counts[bound], bound))
        expected[(phase, name)] = (launches["projected_ns"].sum() / steps[phase], most)
    assert study.kernels.height > 10
    for row in study.kernels.iter_rows(named=True):
        per_step, bound = expected[(row["phase"], row["name"])]
        assert row["projected_per_step_ns"] == pytest.approx(per_step, rel=1e-9)
        assert row["bound"] == bound
    by_group = group_projection(every).sort("phase", "group")
    assert_frame_equal(study.groups.sort("phase", "group"), by_group, check_exact=False, rel_tol=1e-9)


def test_fit_recovers_known_factors():
    rng = np.random.default_rng(0)
    n = 4000
    grid = np.geomspace(0.25, 1.5, 40)
    e_mem, e_cmp, latency = float(grid[30]), float(grid[20]), 2500.0
    bytes_ = rng.uniform(1e4, 5e8, n)
    flops = bytes_ * rng.uniform(1, 2000, n)
    dur = latency + np.maximum(bytes_ / (1e12 * e_mem), flops / (1e15 * e_cmp)) * 1e9
    frame = pl.DataFrame({"name": "k", "kind": "kernel", "phase": "decode", "step": 0, "dur_ns": dur.round().astype(int),
                          "flops": flops, "bytes_moved": bytes_, "precision": "bf16", "category": "GEMM",
                          "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 1, "block_y": 1, "block_z": 1})
    inputs = projection_inputs(conform_kernels(frame), None, MODEL)
    fit = fit_factors([FitRun("synthetic", inputs, TARGET, None)], grid_points=40, efficiency_min=0.25)
    got = fit.factors["matmul"]
    assert got.memory_efficiency == pytest.approx(e_mem, rel=1e-3)
    assert got.compute_efficiency == pytest.approx(e_cmp, rel=1e-3)
    assert got.latency_ns == pytest.approx(latency, abs=1.0)


def test_settings_sweeps_and_spec_files(tmp_path):
    quantities, options = parse_settings("bw=2TB/s, bf16=400TFLOPS, sram=256MB, latency=0.5, fuse=yes, weights=fp8")
    assert quantities == {"bandwidth": 2e12, "bf16": 4e14, "sram_bytes": 256e6, "latency_scale": 0.5}
    assert options == {"fuse": True, "weight_bits": 8}
    assert parse_sweep("bw=1:5:5") == ("bandwidth", [1e12, 2e12, 3e12, 4e12, 5e12])
    assert parse_sweep("sram=64MB:256MB:4")[1] == pytest.approx([64e6, 128e6, 192e6, 256e6])
    spec = tmp_path / "npu.toml"
    spec.write_text('name = "NPU"\nmemory_bandwidth = "6TB/s"\nsram_bytes = "512MB"\n[peak]\nbf16 = 1.2e15\nfp8 = "2.4PFLOPS"\n')
    assert read_spec_file(spec) == {"name": "NPU", "bandwidth": 6e12, "flops": {"bf16": 1.2e15, "fp8": 2.4e15},
                                    "sram_bytes": 512e6}


@pytest.mark.parametrize("text, message", [
    ("bw=2", "--set bw"), ("bw=fast", "not a number"), ("bw=2TB", "unknown unit"), ("color=red", "unknown key"),
    ("fuse=maybe", "--set fuse"), ("weights=fp3", "--set weights"), ("bw", "not KEY=VALUE"),
])
def test_bad_settings(text, message):
    with pytest.raises(UserError, match=message):
        parse_settings(text)


@pytest.mark.parametrize("text, message", [("bw=5:1:3", "START < STOP"), ("bw=1:5", "START:STOP:COUNT"),
                                           ("speed=1:2:3", "KEY=START"), ("bw=1:5:x", "not an integer")])
def test_bad_sweeps(text, message):
    with pytest.raises(UserError, match=message):
        parse_sweep(text)


def test_bad_spec_files(tmp_path):
    missing = tmp_path / "a.toml"
    missing.write_text('name = "x"\n[peak]\nbf16 = 1e15\n')
    with pytest.raises(UserError, match="memory_bandwidth"):
        read_spec_file(missing)
    broken = tmp_path / "b.toml"
    broken.write_text("memory_bandwidth = = 3\n")
    with pytest.raises(UserError, match="not valid TOML"):
        read_spec_file(broken)
    unknown = tmp_path / "c.toml"
    unknown.write_text('memory_bandwidth = 1e12\n[peak]\nbf12 = "1TFLOPS"\n')
    with pytest.raises(UserError, match="unknown precision"):
        read_spec_file(unknown)


def _fit_run(path: Path) -> FitRun:
    run = with_costs_and_names(read_run(path))
    model = default_model()
    target = target_from_ceilings(run_ceilings(run.info), model)
    return FitRun(path.name, projection_inputs(run.kernels, run.ncu, model), target, target.l2_bytes)


@pytest.mark.parametrize("name", ["h200-qwen2-0.5b-ncu", "h100-qwen2-0.5b-ncu", "h200-qwen2-1.5b-slim",
                                  "h200-qwen2-1.5b-b8-slim", "h100-qwen2-1.5b-b8-slim"])
def test_shipped_model_is_calibrated_on_device_runs(name):
    """Each committed device run (two models, two GPUs, two batch sizes) projected onto the GPU that measured
    it: every phase within ±15% of its measured device time."""
    table = calibration_table([_fit_run(RUNS / name)], default_model()).filter(pl.col("phase") != "unknown")
    assert set(table["phase"]) == {"prefill", "decode"}
    for row in table.iter_rows(named=True):
        assert abs(row["ratio"] - 1) <= 0.15, (name, row["phase"], row["ratio"])
    summary = json.loads((RUNS / name / "summary.json").read_text())
    decode = table.filter(pl.col("phase") == "decode").row(0, named=True)
    assert decode["measured_per_step_ns"] == pytest.approx(summary["phases"]["decode"]["device_time_per_step_us"] * 1e3)


def test_every_design_option_has_chinese_words():
    from kernelscope.analyze.projection.whatif import whatif_settings
    from kernelscope.report.templating import message_catalog

    terms = message_catalog("whatif", "zh")["terms"]
    words = [w for s in whatif_settings()["scenarios"] for w in (s["name"], s["what"])]
    missing = [w for w in ["as given", *words] if w not in terms]
    assert not missing, missing
