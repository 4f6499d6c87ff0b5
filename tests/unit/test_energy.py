"""`profile --energy` on a committed H200 run (tests/data/runs/h200-qwen2-1.5b-b8-p512-energy: the board's energy
counter and power as NVML gave them, every window of the pass): the values kernelscope derives, each recomputed here
from power.parquet and energy.parquet with the standard library."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.energy import energy_info
from kernelscope.contracts.energy_tables import StageBounds
from kernelscope.contracts.run_info import RunInfo

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy"


def _samples() -> list[dict]:
    return pl.read_parquet(RUN / "power.parquet").sort("host_ns").to_dicts()


def _windows() -> list[dict]:
    return pl.read_parquet(RUN / "energy.parquet").to_dicts()


def _updates(samples: list[dict]) -> list[tuple[int, int]]:
    """(ns, mJ) of each counter update: the first sample showing a new value."""
    points: list[tuple[int, int]] = []
    for s in samples:
        if s["energy_mj"] is not None and (not points or s["energy_mj"] != points[-1][1]):
            points.append((s["host_ns"], s["energy_mj"]))
    return points


def _counter_at(points: list[tuple[int, int]], t: float) -> float:
    if t <= points[0][0]:
        return points[0][1]
    for (t0, e0), (t1, e1) in zip(points, points[1:], strict=False):
        if t <= t1:
            return e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def _stage_record(name: str):
    info = RunInfo.from_json((RUN / "run.json").read_bytes())
    return next(s for s in info.energy.stages if s.stage == name), info.energy


def _recomputed():
    """energy_info on the committed tables, with the stage bounds run.json holds."""
    info = RunInfo.from_json((RUN / "run.json").read_bytes()).energy
    stages = [StageBounds(s.stage, s.started_ns, s.ended_ns, s.generations) for s in info.stages]
    windows = pl.read_parquet(RUN / "energy.parquet").drop("joules", "joules_from_power")
    return energy_info(pl.read_parquet(RUN / "power.parquet"), windows, stages, info.repeats, info.generations,
                       info.sample_interval_ms / 1e3)


def test_the_counter_updates_far_more_slowly_than_it_is_read():
    samples = _samples()
    points = _updates(samples)
    spacing = statistics.median(b["host_ns"] - a["host_ns"] for a, b in zip(samples, samples[1:], strict=False))
    update = statistics.median(b[0] - a[0] for a, b in zip(points, points[1:], strict=False))
    info, _ = _recomputed()
    assert info.counter_update_ms == pytest.approx(update / 1e6)
    assert info.sample_interval_ms == pytest.approx(spacing / 1e6)
    assert update > 10 * spacing  # reads repeat the last value between updates


@pytest.mark.parametrize("stage", ["prefill_only", "generation"])
def test_each_stage_is_measured_over_the_counters_whole_updates(stage):
    record, _ = _stage_record(stage)
    inside = [(t, e) for t, e in _updates(_samples()) if record.started_ns <= t <= record.ended_ns]
    watts = (inside[-1][1] - inside[0][1]) * 1e-3 / ((inside[-1][0] - inside[0][0]) * 1e-9)
    lengths = {}
    for w in _windows():
        if w["stage"] == stage:
            key = (w["repeat"], w["generation"])
            start, end = lengths.get(key, (w["start_ns"], w["end_ns"]))
            lengths[key] = (min(start, w["start_ns"]), max(end, w["end_ns"]))
    median_s = statistics.median(end - start for start, end in lengths.values()) * 1e-9
    info, _ = _recomputed()
    mine = next(s for s in info.stages if s.stage == stage)
    assert mine.update_intervals == len(inside) - 1 >= 10
    assert mine.mean_watts == pytest.approx(watts)
    assert mine.joules_per_generation == pytest.approx(watts * median_s)
    assert mine == record  # what the run stores


def test_prefill_and_decode_per_token_from_the_stages():
    alone, _ = _stage_record("prefill_only")
    full, _ = _stage_record("generation")
    windows = _windows()
    prompt = sum(w["tokens"] for w in windows if w["stage"] == "prefill_only" and w["phase"] == "prefill")
    new = sum(w["tokens"] for w in windows if w["stage"] == "generation" and w["phase"] == "decode")
    prefill = alone.joules_per_generation / (prompt / alone.generations)
    decode = (full.joules_per_generation - alone.joules_per_generation) / (new / full.generations)
    info, _ = _recomputed()
    assert info.prefill_joules_per_token == pytest.approx(prefill)
    assert info.decode_joules_per_token == pytest.approx(decode)
    assert decode > 10 * prefill  # batch 8 decode reads every weight per step; prefill shares it over 4,096 tokens


def test_per_token_energy_adds_up_to_the_counter_read_around_the_run():
    """The per-token values times the full generations' tokens against the counter's change between the stage's
    edges: within 10%."""
    full, _ = _stage_record("generation")
    points = _updates(_samples())
    counter = (_counter_at(points, full.ended_ns) - _counter_at(points, full.started_ns)) * 1e-3
    windows = [w for w in _windows() if w["stage"] == "generation"]
    prompt = sum(w["tokens"] for w in windows if w["phase"] == "prefill")
    new = sum(w["tokens"] for w in windows if w["phase"] == "decode")
    info, _ = _recomputed()
    rebuilt = info.prefill_joules_per_token * prompt + info.decode_joules_per_token * new
    assert info.counter_joules == pytest.approx(counter)
    assert info.per_token_check == pytest.approx(rebuilt / counter)
    assert abs(rebuilt / counter - 1) <= 0.10


def test_windows_tile_the_counter_over_the_full_generations():
    """Each window's joules: the counter interpolated at its edges; with the rest of the stage they add up to the
    counter's change over it."""
    points = _updates(_samples())
    info, measured = _recomputed()
    for w in measured.filter(pl.col("stage") == "generation").head(40).to_dicts():
        expected = (_counter_at(points, w["end_ns"]) - _counter_at(points, w["start_ns"])) * 1e-3
        assert w["joules"] == pytest.approx(expected)
    assert sum(p.joules for p in info.phases) == pytest.approx(info.counter_joules)
    prefill = next(p for p in info.phases if p.phase == "prefill")
    assert prefill.mean_window_ms < info.counter_update_ms  # labelled estimated in the report


@pytest.mark.slow
def test_energy_needs_a_cuda_gpu(tmp_path):
    result = subprocess.run([sys.executable, "-m", "kernelscope", "profile", "--energy", "--device", "cpu",
                             "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--energy" in result.stderr and "CUDA" in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_run_records_what_its_summary_says():
    run = json.loads((RUN / "run.json").read_text())["energy"]
    from kernelscope.analyze.summary import _energy

    summary = _energy(RunInfo.from_json((RUN / "run.json").read_bytes()).energy)
    assert summary.prefill_joules_per_token == run["prefill_joules_per_token"]
    assert summary.decode_joules_per_token == run["decode_joules_per_token"]
    assert summary.per_token_check == run["per_token_check"]


def test_query_reads_the_per_token_values_of_every_run(tmp_path, capsys):
    """`runs` carries a run's prefill and decode joules per token (null for runs without --energy)."""
    from kernelscope.cli import main

    out = tmp_path / "rows.json"
    assert main(["-q", "query", "select run_id, prefill_joules_per_token, decode_joules_per_token from runs",
                 str(RUN.parent), "--format", "json", "--out", str(out)]) == 0
    rows = {r["run_id"]: r for r in json.loads(out.read_text())}
    energy = json.loads((RUN / "run.json").read_text())["energy"]
    mine = rows.pop(RUN.name)
    assert mine["prefill_joules_per_token"] == pytest.approx(energy["prefill_joules_per_token"])
    assert mine["decode_joules_per_token"] == pytest.approx(energy["decode_joules_per_token"])
    assert rows and all(r["prefill_joules_per_token"] is None for r in rows.values())
