"""The held-out check of the projection (analyze/projection/projection_check.py), the fit on merged samples and the estimate's
range, on the committed H200 and H100 runs of one workload. Expected values come from the runs' own tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.projection.projection import default_model, projection_inputs, target_from_ceilings
from kernelscope.analyze.projection.projection_check import ALL, compare, cross_estimate, measured_per_step
from kernelscope.analyze.projection.projection_fit import FitRun, fit_factors, work_at_full_efficiency
from kernelscope.analyze.projection.projection_model import estimate_spread
from kernelscope.load.rundir import read_run
from kernelscope.pipeline import run_ceilings

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def _fit_run(name: str) -> FitRun:
    run = with_costs_and_names(read_run(RUNS / name, ops=False))
    target = target_from_ceilings(run_ceilings(run.info), default_model())
    return FitRun(name, projection_inputs(run.kernels, run.ncu, default_model()), target, target.l2_bytes,
                  target.family)


@pytest.fixture(scope="module")
def pair() -> tuple[FitRun, FitRun]:
    return _fit_run("h200-qwen2-0.5b-ncu"), _fit_run("h100-qwen2-0.5b-ncu")


def _measured(name: str) -> dict[str, float]:
    """Device time per step per phase, from the run's kernels and its summary's step counts."""
    kernels = pl.read_parquet(RUNS / name / "kernels.parquet", columns=["phase", "dur_ns"])
    steps = {p: v["steps"] for p, v in json.loads((RUNS / name / "summary.json").read_text())["phases"].items()}
    totals: dict[str, float] = {}
    for phase, dur in kernels.iter_rows():
        totals[phase] = totals.get(phase, 0.0) + dur
    return {p: t / steps[p] for p, t in totals.items()}


def _kernel_model_ns(row: dict, target, model) -> float | None:
    """One kernel's projected time on `target`, computed here from the model's factors and the target's ceilings
    (latency + max(bytes ÷ (bandwidth · e_mem), flops ÷ (peak · e_cmp))); None where the projection carries it."""
    factors = model.factors.get(row["group"]) or model.factors["other"]
    flops, moved = row["flops"] or 0.0, row["bytes_used"]
    peak = target.flops.get(row["precision"]) if row["precision"] else None
    if not row["modelled"] or (flops > 0 and peak is None):
        return None
    memory = 1e9 * moved / (target.bandwidth * factors.memory_efficiency) if moved is not None else 0.0
    compute = 1e9 * flops / (peak * factors.compute_efficiency) if flops > 0 else 0.0
    latency = factors.latency_ns * target.latency_scale * target.kind_latency.get(row["group"], 1.0)
    return latency * row["instances"] + max(memory, compute)


def test_cross_estimate_against_the_other_run(pair):
    """Each kernel's measured time × its model on the H100 ÷ its model on the H200, summed per phase."""
    h200, h100 = pair
    model = default_model()
    estimate = cross_estimate(h200.inputs, h200.target, h100.target, model, h200.l2_bytes)
    table = compare(estimate, measured_per_step(h100.inputs)).filter(pl.col("group") == ALL)
    mine, other = _measured("h200-qwen2-0.5b-ncu"), _measured("h100-qwen2-0.5b-ncu")
    steps = {p: v["steps"] for p, v in json.loads((RUNS / "h200-qwen2-0.5b-ncu" / "summary.json").read_text())[
        "phases"].items()}
    expected: dict[str, float] = {}
    for row in h200.inputs.iter_rows(named=True):
        on_source, on_other = _kernel_model_ns(row, h200.target, model), _kernel_model_ns(row, h100.target, model)
        time = row["dur_ns"] * on_other / on_source if on_source else row["dur_ns"]
        expected[row["phase"]] = expected.get(row["phase"], 0.0) + time / steps[row["phase"]]
    assert set(table["phase"]) == set(mine) & set(other)
    for row in table.iter_rows(named=True):
        assert row["measured_ns"] == pytest.approx(mine[row["phase"]])
        assert row["other_ns"] == pytest.approx(other[row["phase"]])
        assert row["estimate_ns"] == pytest.approx(expected[row["phase"]], rel=1e-6)
        assert row["error"] == pytest.approx(row["estimate_ns"] / other[row["phase"]] - 1)
        assert row["log_ratio"] == pytest.approx(np.log(row["estimate_ns"] / other[row["phase"]]))


def test_cross_estimate_of_the_sums(pair):
    """per_kernel=False: the phase's measured time × the ratio of the model's sums."""
    h200, h100 = pair
    estimate = cross_estimate(h200.inputs, h200.target, h100.target, default_model(), h200.l2_bytes, per_kernel=False)
    mine = _measured("h200-qwen2-0.5b-ncu")
    for row in estimate.filter(pl.col("group") == ALL).iter_rows(named=True):
        expected = mine[row["phase"]] * row["target_model_ns"] / row["source_model_ns"]
        assert row["estimate_ns"] == pytest.approx(expected)


def test_kinds_of_work_add_up_to_the_phase(pair):
    h200, h100 = pair
    estimate = cross_estimate(h200.inputs, h200.target, h100.target, default_model(), h200.l2_bytes)
    for phase in ("prefill", "decode"):
        rows = estimate.filter(pl.col("phase") == phase)
        parts = rows.filter(pl.col("group") != ALL)
        total = rows.filter(pl.col("group") == ALL)
        for column in ("measured_ns", "source_model_ns", "target_model_ns"):
            assert parts[column].sum() == pytest.approx(total[column][0])


def test_small_kinds_left_out_of_the_comparison(pair):
    h200, h100 = pair
    estimate = cross_estimate(h200.inputs, h200.target, h100.target, default_model(), h200.l2_bytes)
    other = measured_per_step(h100.inputs)
    kept = compare(estimate, other, min_share=0.2)
    phase_total = {r["phase"]: r["other_ns"] for r in other.filter(pl.col("group") == ALL).iter_rows(named=True)}
    for row in kept.filter(pl.col("group") != ALL).iter_rows(named=True):
        assert row["other_ns"] >= 0.2 * phase_total[row["phase"]]
    assert kept.filter(pl.col("group") != ALL).height < compare(estimate, other).filter(pl.col("group") != ALL).height


def test_merged_fit_is_the_least_squares_fit_over_every_kernel(pair):
    """Kernels merged into weighted rows: each kind's fitted latency still zeroes the derivative of the squared error
    over every single kernel (where it is above zero), computed here without merging."""
    runs = list(pair)
    fit = fit_factors(runs, grid_points=12, efficiency_min=0.25, efficiency_max=1.5, device_scales=False)
    samples = pl.concat([work_at_full_efficiency(r) for r in runs])
    for group, factors in fit.factors.items():
        rows = samples.filter(pl.col("group") == group)
        y, mem, cmp_, n = (rows[c].to_numpy() for c in ("dur_ns", "memory_ns", "compute_ns", "instances"))
        work = np.maximum(mem / factors.memory_efficiency, cmp_ / factors.compute_efficiency)
        latency = float((n * (y - work)).sum() / (n * n).sum())
        if latency > 0:
            assert factors.latency_ns == pytest.approx(latency, abs=0.1)


def test_relative_fit_weighs_phases_alike(pair):
    """With relative errors, every kernel's weight is 1 / (its phase's measured time)²: the latency found zeroes the
    weighted derivative over every kernel."""
    runs = list(pair)
    fit = fit_factors(runs, grid_points=12, efficiency_min=0.25, efficiency_max=1.5, relative=True,
                      device_scales=False)
    parts = []
    for run in runs:
        totals = run.inputs.group_by("phase").agg(pl.col("dur_ns").sum().cast(pl.Float64).alias("t"))
        phase_of = work_at_full_efficiency(run).with_columns(pl.lit(run.label).alias("run"))
        # work_at_full_efficiency keeps the phase's total: check it against the inputs' own sums.
        assert set(np.round(phase_of["phase_ns"].unique().to_numpy())) <= set(np.round(totals["t"].to_numpy()))
        parts.append(phase_of)
    samples = pl.concat(parts)
    group = "matmul"
    f = fit.factors[group]
    rows = samples.filter(pl.col("group") == group)
    y, mem, cmp_, n, t = (rows[c].to_numpy() for c in ("dur_ns", "memory_ns", "compute_ns", "instances", "phase_ns"))
    w = 1 / t ** 2
    work = np.maximum(mem / f.memory_efficiency, cmp_ / f.compute_efficiency)
    latency = float((w * n * (y - work)).sum() / (w * n * n).sum())
    assert f.latency_ns == pytest.approx(max(latency, 0.0), abs=0.1)


def test_estimate_spread_by_family(pair):
    h200, h100 = pair
    model = default_model()
    shipped = model.uncertainty
    assert h200.target.family == h100.target.family == "Hopper"  # data/hardware.toml
    assert estimate_spread(model, h200.target, h100.target) == shipped["same"]["*"]
    assert estimate_spread(model, h200.target, h200.target) == 0.0
    accelerator = h100.target.changed(name="NPU-1", family=None)
    assert estimate_spread(model, h200.target, accelerator) == shipped["other"]["*"]
    amd = h100.target.changed(name="AMD Instinct MI300X", family="CDNA 3")
    assert estimate_spread(model, h200.target, amd) == shipped["other"]["*"]


def test_device_scales_from_pairs(pair):
    """Runs fitted with a latency scale each: the devices' ratio is the pairs' ratio of their runs' scales."""
    from kernelscope.analyze.projection.projection_pairs import scales_from_pairs

    h200, h100 = pair
    other = (_fit_run("h200-qwen2-1.5b-slim"), _fit_run("h100-qwen2-1.5b-b1-slim"))
    runs = [h200, h100, *other]
    fit = fit_factors(runs, grid_points=12, efficiency_min=0.25, efficiency_max=1.5, relative=True, scale_by="run")
    assert set(fit.run_latency) == {r.label for r in runs}
    device_of = {r.label: r.target.name for r in runs}
    scales = scales_from_pairs(fit.run_latency, device_of, [(h200.label, h100.label), (other[0].label, other[1].label)])
    ratios = [fit.run_latency[h100.label] / fit.run_latency[h200.label],
              fit.run_latency[other[1].label] / fit.run_latency[other[0].label]]
    expected = float(np.exp(np.mean(np.log(ratios))))  # the two pairs' ratios, equally weighted in ln
    assert scales[h100.target.name] / scales[h200.target.name] == pytest.approx(expected, rel=0.02)


def test_fit_pair_names_each_run_once(tmp_path):
    from kernelscope.commands.hw import fit_projection
    from kernelscope.errors import UserError

    runs = [RUNS / "h200-qwen2-0.5b-ncu", RUNS / "h100-qwen2-0.5b-ncu"]
    with pytest.raises(UserError, match="more than one pair"):
        fit_projection(runs, None, [[runs[0], runs[1]], [runs[0], RUNS / "h200-qwen2-1.5b-slim"]])


def test_kind_latency_multiplies_that_kind_only(pair):
    """A target's per-kind latency multiplies the per-launch latency of its kind of work, and of no other."""
    from kernelscope.analyze.projection.projection import Options, project

    h200, _ = pair
    model = default_model()
    plain = project(h200.inputs, h200.target.changed(kind_latency={}), model, Options(), h200.l2_bytes)
    slow = project(h200.inputs, h200.target.changed(kind_latency={"attention": 3.0}), model, Options(), h200.l2_bytes)
    for group, base, now in zip(plain["group"], plain["latency_per_launch_ns"], slow["latency_per_launch_ns"],
                                strict=True):
        factor = model.factors_of(group).latency_ns * h200.target.latency_scale
        assert base == pytest.approx(factor)
        assert now == pytest.approx(factor * (3.0 if group == "attention" else 1.0))


def test_device_kinds_fit_lowers_the_pairs_error(pair):
    """Fitting the H100's per-kind latency and roof shares from the pair never leaves the pair's squared ln error
    (per phase and kind, both ways) above that of no multipliers, and every value comes from the grids."""
    from kernelscope.analyze.projection.projection_kinds import (
        KIND_GRID,
        ROOF_GRID,
        fit_device_kinds,
        log_errors,
        side,
    )

    h200, h100 = pair
    model = default_model()
    sides = []
    for own, other in ((h200, h100), (h100, h200)):
        measured = {(p, g): v for p, g, v in measured_per_step(other.inputs).iter_rows() if g != ALL}
        sides.append(side(own.inputs, own.target, other.target, model, own.l2_bytes, own.label, other.label, measured))
    kinds, roofs = fit_device_kinds(sides, {h100.label})

    def cost(k, r):
        return sum(e * e for s in sides for e in log_errors(s, k, r))

    assert cost(kinds, roofs) <= cost({}, {}) + 1e-12
    assert all(min(abs(v - g) for g in KIND_GRID) < 1e-3 for v in kinds.get(h100.label, {}).values())
    assert all(min(abs(v - g) for g in ROOF_GRID) < 1e-3 for v in roofs.get(h100.label, ()))
