"""The report of a run measured with `profile --energy` (committed H200 run): its Energy section, in both languages,
says the per-token values and the check that the run's own tables give, and summary.json carries them."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy"
pytestmark = pytest.mark.slow


def _per_token() -> tuple[float, float]:
    """Prefill and decode joules per token from power.parquet, energy.parquet and the stage bounds of run.json."""
    samples = pl.read_parquet(RUN / "power.parquet").sort("host_ns").to_dicts()
    points = []
    for s in samples:
        if not points or s["energy_mj"] != points[-1][1]:
            points.append((s["host_ns"], s["energy_mj"]))
    stages = {s["stage"]: s for s in json.loads((RUN / "run.json").read_text())["energy"]["stages"]}
    windows = pl.read_parquet(RUN / "energy.parquet").to_dicts()
    per_generation, tokens = {}, {}
    for name, stage in stages.items():
        inside = [p for p in points if stage["started_ns"] <= p[0] <= stage["ended_ns"]]
        watts = (inside[-1][1] - inside[0][1]) * 1e-3 / ((inside[-1][0] - inside[0][0]) * 1e-9)
        spans: dict = {}
        for w in windows:
            if w["stage"] == name:
                start, end = spans.get((w["repeat"], w["generation"]), (w["start_ns"], w["end_ns"]))
                spans[(w["repeat"], w["generation"])] = (min(start, w["start_ns"]), max(end, w["end_ns"]))
        per_generation[name] = watts * statistics.median(e - s for s, e in spans.values()) * 1e-9
        phase = "prefill" if name == "prefill_only" else "decode"
        tokens[name] = sum(w["tokens"] for w in windows if w["stage"] == name and w["phase"] == phase) / len(spans)
    prefill = per_generation["prefill_only"] / tokens["prefill_only"]
    decode = (per_generation["generation"] - per_generation["prefill_only"]) / tokens["generation"]
    return prefill, decode


def _unit(joules: float) -> str:
    return f"{joules:,.1f} J" if joules >= 1 else f"{joules * 1e3:,.2f} mJ"


def test_energy_section_in_both_languages(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["-q", "report", str(run), "--figure-formats", "none"]) == 0
    prefill, decode = _per_token()
    english = (run / "report" / "report.md").read_text()
    section = english.split("### Energy", 1)[1].split("\n### ", 1)[0]
    assert f"**{_unit(prefill)} per prompt token**" in section
    assert f"**{_unit(decode)} per new token**" in section
    assert "(estimated)" in section  # the windows are shorter than the counter's updates
    chinese = (run / "report" / "report.zh.md").read_text()
    section_zh = chinese.split("### 能耗", 1)[1].split("\n### ", 1)[0]
    assert f"**每个提示 token {_unit(prefill)}**" in section_zh
    assert f"**每个新 token {_unit(decode)}**" in section_zh
    summary = json.loads((run / "summary.json").read_text())["energy"]
    assert summary["prefill_joules_per_token"] == pytest.approx(prefill)
    assert summary["decode_joules_per_token"] == pytest.approx(decode)


def test_a_run_without_energy_has_no_energy_section(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN.parent / "h200-qwen2-1.5b-slim", run)
    assert main(["-q", "report", str(run), "--figure-formats", "none"]) == 0
    assert "### Energy" not in (run / "report" / "report.md").read_text()
    assert "energy" not in json.loads((run / "summary.json").read_text())
