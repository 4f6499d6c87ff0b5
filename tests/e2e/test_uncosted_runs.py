"""Runs whose kernels mostly have no analytic costs (a serving engine's CUDA-graph replays imported without their
capture traces: no op shapes) say so instead of sizing hardware or projecting from the few that do: the report's
first lines, its accelerator section and what-if projection, and `kernelscope whatif`; a run without a decode
phase says that. Expectations come from the run's own kernels table."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public" / "tracelens"
SGLANG = PUBLIC / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")


@pytest.fixture(scope="module")
def sglang_run(tmp_path_factory) -> Path:
    """SGLang's decode window without its capture trace: its replayed kernels have no shapes to be costed from."""
    out = tmp_path_factory.mktemp("uncosted") / "run"
    assert main(["import", str(SGLANG), "--out", str(out), "--lang", "en"]) == 0
    return out


def test_low_cost_coverage_is_said_first_with_what_would_recover_it(sglang_run):
    kernels = pl.read_parquet(sglang_run / "kernels.parquet")
    total = kernels["dur_ns"].sum()
    costed = kernels.filter(pl.col("cost_model").is_not_null())["dur_ns"].sum() / total
    replays = kernels.filter(pl.col("cost_model").is_null() & pl.col("launch_api").is_in(GRAPH_LAUNCHES))
    report = (sglang_run / "report" / "report.md").read_text()
    overview = report.split("## Overview")[1].split("\n## ")[0].strip()
    first = overview.splitlines()[0]
    assert first.startswith("**Most of this run is not costed:**")
    assert f"only {100 * costed:.1f}% of the device time" in first
    assert f"replays without the shapes of their capture hold {100 * replays['dur_ns'].sum() / total:.1f}%" in first
    assert "`--capture`" in first


def _costed_share(run: Path, phase: str) -> float:
    kernels = pl.read_parquet(run / "kernels.parquet").filter(pl.col("phase") == phase)
    return kernels.filter(pl.col("cost_model").is_not_null())["dur_ns"].sum() / kernels["dur_ns"].sum()


def test_the_accelerator_section_does_not_size_hardware_from_a_sliver_of_costs(sglang_run):
    share = _costed_share(sglang_run, "decode")
    assert 0 < share < 0.5
    report = (sglang_run / "report" / "report.md").read_text()
    section = report.split("## Recommendations for accelerator (NPU) design")[1].split("\n## ")[0]
    assert f"Not estimated: the analytic bytes and FLOPs cover only {100 * share:.1f}% of decode device time" in section
    assert "One decode step moves" not in section and "| Target |" not in section
    assert "Working sets" not in section
    # What needs no costs (the catalog's categories) is still given.
    assert "Ops a fixed-function unit beside the matrix engine could take" in section


def test_the_projection_says_it_would_only_carry_the_run(sglang_run):
    report = (sglang_run / "report" / "report.md").read_text()
    section = report.split("### Projection by the what-if model")[1].split("\n## ")[0]
    assert "The what-if model cannot project this run: more than 50% of the device time of decode" in section
    assert "so the model explains this run" not in report
    assert "What each design option alone would buy" not in section
    # The calibration table stays, its Carried column (the share of projected time held at measured durations)
    # above the bound.
    row = next(line for line in section.splitlines() if line.startswith("| decode |"))
    assert float(row.rstrip(" |").split("|")[-1].strip().rstrip("%")) > 50


def test_whatif_does_not_call_a_carried_run_calibrated(sglang_run, tmp_path):
    out = tmp_path / "w"
    assert main(["whatif", str(sglang_run), "--hw", "mi325x", "--out", str(out), "--lang", "en"]) == 0
    key = json.loads((out / "whatif.json").read_text())
    assert key["calibration_holds"] is False and key["carried_phases"] == ["decode"]
    assert "The model cannot project decode: more than 50% of that device time" in (out / "whatif.md").read_text()


@pytest.mark.slow
def test_a_run_without_decode_says_so_rather_than_blaming_costs(tmp_path):
    trace = PUBLIC / "traces__b200__eager_trace.json.gz"  # one vLLM prefill step
    out = tmp_path / "run"
    assert main(["import", str(trace), "--out", str(out), "--lang", "en"]) == 0
    kernels = pl.read_parquet(out / "kernels.parquet")
    assert kernels.filter(pl.col("phase") == "decode").height == 0 and kernels.height > 0
    report = (out / "report" / "report.md").read_text()
    section = report.split("## Recommendations for accelerator (NPU) design")[1].split("\n## ")[0]
    assert "Not available: the run has no decode phase" in section
    assert "no analytic costs" not in section
