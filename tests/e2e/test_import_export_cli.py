"""`kernelscope import` of nsys stats summaries and `kernelscope export` through the command line: what a user
types, the exit codes and one-line errors."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.load.nsys_stats import read_nsys_stats
from tests.e2e.test_cli import kernelscope

DATA = Path(__file__).resolve().parents[1] / "data"
NSYS = DATA / "nsys"
RUN = DATA / "runs" / "h200-qwen2-0.5b-ncu"


@pytest.mark.slow
def test_import_nsys_stats_per_stage_files(tmp_path):
    out = tmp_path / "stats"
    result = kernelscope("import", str(NSYS / "prefill.csv"), str(NSYS / "decode.csv"), "--out", str(out),
                         "--lang", "en")
    assert result.returncode == 0, result.stderr
    for phase in ("prefill", "decode"):
        source = read_nsys_stats(NSYS / f"{phase}.csv").select("name", "total_ns", "instances").sort("name")
        table = pl.read_csv(out / "report" / "tables" / f"kernels_{phase}.csv")
        assert table.select("name", "total_ns", "instances").sort("name").equals(source)


@pytest.mark.slow
def test_export_then_import_through_the_cli(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    result = kernelscope("export", str(run), "--format", "perfetto")
    assert result.returncode == 0, result.stderr
    trace = Path(result.stdout.strip().splitlines()[-1])
    assert trace == run / "export" / "trace.perfetto.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all("ks.phase" in e["args"] and "ks.friendly_name" in e["args"] for e in kernels)
    back = tmp_path / "back"
    assert kernelscope("import", str(trace), "--out", str(back), "--no-report").returncode == 0
    original = pl.read_parquet(RUN / "kernels.parquet").sort("start_ns")
    again = pl.read_parquet(back / "kernels.parquet").sort("start_ns")
    columns = ["name", "dur_ns", "phase", "step", "module", "layer", "op"]
    assert again.select(columns).equals(original.select(columns))

    result = kernelscope("export", str(run), "--format", "kern-sum", "--phase", "decode", "--out", str(tmp_path / "k.csv"))
    assert result.returncode == 0, result.stderr
    header = (tmp_path / "k.csv").read_text().splitlines()[0]
    assert header.startswith("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name")


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "kern_sum.csv"
    missing.write_text("Time (%),Total Time (ns),Name\n50.0,100,k\n")
    cases = [
        (["import", str(missing)], "missing column(s) Instances"),
        (["import", str(NSYS / "decode.csv"), str(DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz")],
         "one kind of file at a time"),
        (["export", str(tmp_path / "nowhere"), "--format", "kern-sum"], "no such run directory"),
    ]
    for args, message in cases:
        result = kernelscope(*args, "--out", str(tmp_path / "never")) if args[0] == "import" else kernelscope(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "never").exists()
