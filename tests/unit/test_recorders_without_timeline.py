"""Recorders read as they mean: Nsight Compute results are kernels measured one at a time (no timeline is made up
for them), and a kern-sum export of a CPU-only run imports again as CPU work. Expected values come from the input
files (csv module, json)."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
NCU_RAW = DATA / "ncu" / "h200-qwen2-0.5b-decode.raw.csv"
CPU_RANK = DATA / "public" / "hta" / "data__rank_non_gpu__rank_non_gpu.json.gz"


@pytest.fixture(scope="module")
def ncu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ncu") / "run"
    assert main(["-q", "import", str(NCU_RAW), "--out", str(out), "--lang", "en", "--figure-formats", "none"]) == 0
    return out


def _ncu_durations_ns() -> list[int]:
    with NCU_RAW.open(newline="") as f:
        rows = list(csv.DictReader(f))
    units = rows[0]  # the raw page's second line holds the units
    assert units["gpu__time_duration.sum"] in ("ns", "usecond", "msecond", "nsecond", "us")
    scale = {"ns": 1, "nsecond": 1, "us": 1000, "usecond": 1000, "msecond": 10**6}[units["gpu__time_duration.sum"]]
    return [round(float(r["gpu__time_duration.sum"].replace(",", "")) * scale) for r in rows[1:]]


def test_nsight_compute_kernels_have_no_made_up_timeline(ncu_run):
    kernels = pl.read_parquet(ncu_run / "kernels.parquet")
    assert sorted(kernels["dur_ns"].to_list()) == sorted(_ncu_durations_ns())
    assert kernels["start_ns"].null_count() == kernels.height  # no back-to-back schedule
    phases = pl.read_csv(ncu_run / "report" / "tables" / "phases.csv")
    assert phases["busy_pct"].null_count() == phases.height and phases["span_ns"].null_count() == phases.height
    report = (ncu_run / "report" / "report.md").read_text()
    table = report.split("### Device time by phase")[1].split("\n\n")[1]
    assert "GPU busy" not in table and "Span" not in table  # the columns a timeline gives are left out
    assert "Nsight Compute replays each kernel on its own" in report
    assert json.loads((ncu_run / "run.json").read_text())["trace"]["format"] == "ncu"


def test_nsight_compute_results_refuse_a_perfetto_trace(ncu_run, capsys):
    assert main(["-q", "export", str(ncu_run), "--format", "perfetto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no timeline to export as a trace" in err[0]
    assert not (ncu_run / "export").exists()


def test_kern_sum_of_a_cpu_only_run_imports_as_cpu_work(tmp_path):
    with gzip.open(CPU_RANK, "rt") as f:
        events = json.load(f)["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    run = tmp_path / "run"
    assert main(["-q", "import", str(CPU_RANK), "--out", str(run), "--no-report"]) == 0
    exported = tmp_path / "kern_sum.csv"
    assert main(["-q", "export", str(run), "--format", "kern-sum", "--out", str(exported)]) == 0
    with exported.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["Kind"] for r in rows} == {"cpu_op"}
    again = tmp_path / "again"
    assert main(["-q", "import", str(exported), "--out", str(again), "--lang", "en", "--figure-formats", "none"]) == 0
    summary = json.loads((again / "summary.json").read_text())
    assert summary["kind"] == "cpu" and summary["device_time_us"] == 0.0
    assert summary["kernel_count"] == len(ops)
    assert summary["cpu_time_us"] == json.loads((run / "summary.json").read_text())["cpu_time_us"]
    assert set(pl.read_parquet(again / "kernels.parquet")["kind"]) == {"cpu_op"}
