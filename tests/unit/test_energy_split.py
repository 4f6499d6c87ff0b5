"""The energy split by class of kernels and the power-over-time figure's data, on the committed H200 run measured with
`profile --energy` (tests/data/runs/h200-qwen2-1.5b-b8-p512-energy): the fit's inputs per counter interval and its
solution recomputed here from power.parquet, energy.parquet and kernels.parquet in plain Python; hostile tables give
no figure and no split, never an exception."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kernelscope.analyze.energy_split import energy_split, interval_design, kernel_classes
from kernelscope.analyze.energy_timeline import MAX_BINS, power_timeline
from kernelscope.contracts.energy_split import DETERMINED, IDLE, NOT_DETERMINED
from kernelscope.load import rundir
from kernelscope.load.energy_files import read_energy_tables
from kernelscope.pipeline import run_ceilings

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy"


def _updates() -> list[tuple[int, int]]:
    points: list[tuple[int, int]] = []
    for s in pl.read_parquet(RUN / "power.parquet").sort("host_ns").to_dicts():
        if not points or s["energy_mj"] != points[-1][1]:
            points.append((s["host_ns"], s["energy_mj"]))
    return points


def _device_ns_by_window() -> list[tuple[int, int, float]]:
    """Per window: start, end and the device ns of the profiled kernels of its phase and step (a decode window of
    step s holds the kernels' decode step s - 1; setup windows hold none)."""
    kernels = pl.read_parquet(RUN / "kernels.parquet", columns=["phase", "step", "dur_ns"]).to_dicts()
    per: dict[tuple, float] = {}
    for k in kernels:
        key = (k["phase"], k["step"] if k["phase"] == "decode" else None)
        per[key] = per.get(key, 0.0) + k["dur_ns"]
    out = []
    for w in pl.read_parquet(RUN / "energy.parquet").to_dicts():
        key = {"prefill": ("prefill", None), "decode": ("decode", w["step"] - 1)}.get(w["phase"])
        out.append((w["start_ns"], w["end_ns"], per.get(key, 0.0) if key else 0.0))
    return out


def _hand_design() -> tuple[list[list[float]], list[float]]:
    """Per counter interval inside the pass: [seconds, kernels' device seconds] and the counter's joules."""
    windows = _device_ns_by_window()
    lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)
    rows, joules = [], []
    updates = _updates()
    for (a, ea), (b, eb) in zip(updates, updates[1:], strict=False):
        if a < lo or b > hi:
            continue
        device = sum(max(0, min(e, b) - max(s, a)) / (e - s) * ns for s, e, ns in windows)
        rows.append([(b - a) * 1e-9, device * 1e-9])
        joules.append((eb - ea) * 1e-3)
    return rows, joules


@pytest.fixture(scope="module")
def stored():
    run = rundir.read_run(RUN, ops=False)
    return run, run_ceilings(run.info)


def test_the_fit_inputs_per_interval(stored):
    run, _ = stored
    rows, joules = _hand_design()
    kernels = run.kernels.with_columns(kernel_classes(run.kernels, "all", None).alias("_class"))
    design = interval_design(run.energy.samples, run.energy.windows, kernels)
    assert design.dropped == 0 and len(design.joules) == len(joules)
    assert design.seconds == pytest.approx([r[0] for r in rows])
    assert design.class_seconds[:, 0] == pytest.approx([r[1] for r in rows])
    assert design.joules == pytest.approx(joules)


def test_the_split_is_the_least_squares_fit_and_says_how_it_was_judged(stored):
    run, ceilings = stored
    rows, joules = _hand_design()
    x, y = np.array(rows), np.array(joules)
    watts = np.linalg.lstsq(x, y, rcond=None)[0]
    split = energy_split(run.energy.samples, run.energy.windows, run.kernels, ceilings)
    assert split.status == DETERMINED and split.model == "kernels" and split.intervals == len(joules)
    assert [t.term for t in split.terms] == [IDLE, "kernels"]
    assert [t.watts for t in split.terms] == pytest.approx(list(watts))
    residual = math.sqrt(sum((yi - xi @ watts) ** 2 for xi, yi in zip(x, y, strict=True)) / len(y)) / (sum(y) / len(y))
    assert split.residual == pytest.approx(residual)
    assert split.residual <= split.limits["max_residual"] and split.condition <= split.limits["max_condition"]
    # The finer model (compute- and memory-bound kernels) was tried first and said why it does not hold.
    assert split.tried[0].model == "roofline" and split.tried[0].reason
    # Per token of the full generations: each term's watts times its seconds in the phase's windows.
    decode = next(p for p in split.per_token if p.phase == "decode")
    windows = pl.read_parquet(RUN / "energy.parquet").filter((pl.col("stage") == "generation")
                                                             & (pl.col("phase") == "decode")).to_dicts()
    seconds = sum(w["end_ns"] - w["start_ns"] for w in windows) * 1e-9
    assert decode.tokens == sum(w["tokens"] for w in windows)
    assert decode.joules_per_token[IDLE] == pytest.approx(watts[0] * seconds / decode.tokens)


def test_a_window_with_no_kernels_drops_its_intervals(stored):
    run, ceilings = stored
    windows = run.energy.windows.with_columns(
        pl.when((pl.col("phase") == "decode") & (pl.col("step") == 5)).then(999).otherwise(pl.col("step"))
        .alias("step"))
    split = energy_split(run.energy.samples, windows, run.kernels, ceilings)
    assert split.dropped_intervals > 0
    none = energy_split(run.energy.samples, run.energy.windows, run.kernels.with_columns(pl.lit("unknown")
                                                                                         .alias("phase")), ceilings)
    assert none.status == NOT_DETERMINED and "no window" in none.reason


def test_the_timeline_spans_the_samples_and_bins_them(stored):
    run, _ = stored
    samples = pl.read_parquet(RUN / "power.parquet").to_dicts()
    times = [s["host_ns"] for s in samples if s["power_mw"] is not None]
    timeline = power_timeline(run.energy.samples, run.energy.windows)
    assert timeline.end_s == pytest.approx((max(times) - min(times)) * 1e-9)
    assert len(timeline.bin_s) <= MAX_BINS and timeline.points == len(times)
    assert float(timeline.low_w.min()) == pytest.approx(min(s["power_mw"] for s in samples) * 1e-3)
    assert float(timeline.high_w.max()) == pytest.approx(max(s["power_mw"] for s in samples) * 1e-3)
    updates = _updates()
    assert len(timeline.update_w) == len(updates) - 1
    (a, ea), (b, eb) = updates[0], updates[1]
    assert timeline.update_w[0] == pytest.approx((eb - ea) * 1e-3 / ((b - a) * 1e-9))
    first_prefill = min(w["start_ns"] for w in pl.read_parquet(RUN / "energy.parquet").to_dicts()
                        if w["phase"] == "prefill")
    assert timeline.spans["prefill"][0][0] == pytest.approx((first_prefill - min(times)) * 1e-9)
    assert sum(len(v) for v in timeline.spans.values()) < 1000


@pytest.mark.parametrize("power", [[float("nan")] * 3, [-5.0, -1.0, float("nan")], []])
def test_hostile_power_gives_no_timeline(tmp_path, power):
    pl.DataFrame({"host_ns": list(range(len(power))), "energy_mj": [1] * len(power), "energy_at_ns": [0] * len(power),
                  "power_mw": power, "power_at_ns": [0] * len(power)},
                 schema={"host_ns": pl.Int64, "energy_mj": pl.Int64, "energy_at_ns": pl.Int64,
                         "power_mw": pl.Float64, "power_at_ns": pl.Int64}).write_parquet(tmp_path / "power.parquet")
    pl.read_parquet(RUN / "energy.parquet").write_parquet(tmp_path / "energy.parquet")
    tables = read_energy_tables(tmp_path)
    assert power_timeline(tables.samples, tables.windows) is None


def test_a_file_that_is_not_parquet_is_one_line(tmp_path):
    (tmp_path / "power.parquet").write_text("not parquet")
    tables = read_energy_tables(tmp_path)
    assert tables.samples.is_empty() and "power.parquet: unreadable Parquet file" in tables.problem
    assert "\n" not in tables.problem


def test_summary_of_a_report_carries_the_split(tmp_path):
    """The committed run's run.json predates the split: the report computes it and summary.json carries it."""
    import shutil

    from kernelscope.cli import main

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "power.parquet").unlink()
    pl.DataFrame(schema={"host_ns": pl.Int64, "energy_mj": pl.Int64}).write_parquet(run / "power.parquet")
    assert main(["-q", "report", str(run), "--figure-formats", "png"]) == 0
    report = (run / "report" / "report.md").read_text()
    assert "No power figure: " in report and "energy_power" not in report
    split = json.loads((run / "summary.json").read_text())["energy"]["split"]
    assert split["status"] == NOT_DETERMINED
    assert "Energy by class of kernels: not shown" in report
