"""Importing nsys stats kernel summaries, one CSV per stage (tests/data/nsys/prefill.csv, decode.csv, written in the
shape `nsys stats --report cuda_gpu_kern_sum --format csv` gives), into a run directory with a report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from kernelscope.commands.importers.nsys_stats import import_nsys_stats
from kernelscope.errors import UserError
from kernelscope.load.nsys_stats import read_nsys_stats
from kernelscope.load.rundir import read_run
from kernelscope.pipeline import rerender

NSYS = Path(__file__).parents[1] / "data" / "nsys"
STAGES = {"prefill": NSYS / "prefill.csv", "decode": NSYS / "decode.csv"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nsys") / "run"
    assert import_nsys_stats(list(STAGES.values()), out, out.parent) == out.resolve()
    return out


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split("\n", 1)[0].strip(): p.split("\n", 1)[1] for p in parts}


def test_run_directory_and_metadata(run):
    for name in ["run.json", "summary.json", "kernels.parquet", "ops.parquet", "report/report.md",
                 "report/report.zh.md", "report/report.html", "report/tables/kernels_prefill.csv",
                 "report/tables/kernels_decode.csv"]:
        assert (run / name).is_file(), name
    meta = json.loads((run / "run.json").read_text())
    assert meta["source"] == "import"
    assert meta["hardware"]["device_type"] == "cuda" and meta["hardware"]["name"] is None
    assert meta["inputs"] == [str(p) for p in STAGES.values()]
    assert meta["trace"]["format"] == "nsys-stats"
    assert [f["report"] for f in meta["trace"]["files"]] == ["cuda_gpu_kern_sum"] * 2
    assert [f["phase_from"] for f in meta["trace"]["files"]] == ["file name"] * 2


def test_kernels_rows_stand_for_their_launches(run):
    kernels = read_run(run).kernels
    for phase, path in STAGES.items():
        table = read_nsys_stats(path)
        rows = kernels.filter(pl.col("phase") == phase)
        assert rows.height == table.height
        assert rows["dur_ns"].to_list() == table["total_ns"].to_list()
        assert rows["instances"].to_list() == table["instances"].to_list()
        for column in ("min_ns", "max_ns", "med_ns", "stddev_ns"):
            assert rows[column].to_list() == table[column].to_list(), column
    assert kernels["kind"].unique().to_list() == ["kernel"]
    assert kernels["step"].null_count() == kernels.height and kernels["start_ns"].null_count() == kernels.height
    assert kernels["module"].null_count() == kernels.height and kernels["op"].null_count() == kernels.height
    assert kernels["rank"].unique().sort().to_list() == [0, 1]


def test_kernel_tables_equal_the_inputs(run):
    for phase, path in STAGES.items():
        table = read_nsys_stats(path).sort("name")
        report = pl.read_csv(run / "report" / "tables" / f"kernels_{phase}.csv").sort("name")
        assert report["name"].to_list() == table["name"].to_list()
        for column in ("total_ns", "instances", "med_ns", "min_ns", "max_ns", "stddev_ns"):
            assert report[column].to_list() == table[column].to_list(), (phase, column)
        # nsys prints the average and the share rounded to one decimal
        assert (report["avg_ns"] - table["avg_ns"]).abs().max() <= 0.05 + 1e-6
        assert (report["time_pct"] - table["time_pct"]).abs().max() <= 0.05 + 1e-6


def test_summary_counts_launches(run):
    summary = json.loads((run / "summary.json").read_text())
    tables = {phase: read_nsys_stats(path) for phase, path in STAGES.items()}
    total_ns = sum(int(t["total_ns"].sum()) for t in tables.values())
    assert summary["device_time_us"] == pytest.approx(total_ns / 1e3, abs=1e-6)
    assert summary["kernel_count"] == sum(int(t["instances"].sum()) for t in tables.values())
    assert summary["kernel_rows"] == sum(t.height for t in tables.values())
    assert summary["phase_coverage"] == 1.0 and summary["module_coverage"] == 0.0
    assert summary["catalog_coverage"] == 1.0
    for phase, table in tables.items():
        p = summary["phases"][phase]
        assert p["kernel_count"] == int(table["instances"].sum())
        assert p["device_time_us"] == pytest.approx(int(table["total_ns"].sum()) / 1e3)
        assert p["steps"] is None and p["device_time_per_step_us"] is None and p["kernels_per_step"] is None


def test_report_reads_sensibly(run):
    text = (run / "report" / "report.md").read_text()
    body = _sections(text)
    assert "None" not in text and "nan" not in text.lower().split()
    assert "Nsight Systems kernel summaries (`nsys stats`)" in body["Setup"]
    overview = body["Overview"]
    assert "- Prefill: 255 kernels, 6.393 ms." in overview  # no steps claimed
    # Columns no summary can fill (span, busy share, gaps, launch calls) are left out; steps stay, unknown.
    assert "| prefill | 255 | 6.393 ms | 7.3% | – | – | – |" in body["Timings"]
    top = body["Top kernels by total time"]
    assert "| 48.6% | cuBLASLt | GEMM | cuBLASLt GEMM (BF16, tile 256x128x64) |" in top
    assert "| 3.110 ms | 56 | 55.529 µs | 55.488 µs | 52.191 µs | 61.345 µs | 2.105 µs |" in top
    assert "| 44.8% | cuBLASLt | GEMM | cuBLASLt GEMM (BF16, tile 64x8x64, split-K) |" in top
    assert "| GEMM | 3 | 7,119 | 50.513 ms | 62.5% |" in top  # mix: launches are summed instances
    longest = body["Top kernels by single-launch duration"]
    assert "| cuBLASLt GEMM (BF16, tile 128x8x64) | 72.993 µs | 70.048 µs | 63 |" in longest
    assert "Not available: kernel summaries hold no single launches." in body["Histograms"]
    assert "Not available: the input does not name its device" in body["Roofline"]
    assert body["Op groups"].count("Not available: kernel summaries carry neither launch order nor framework ops.") == 1
    assert "Kernel summaries carry no launch records" in body["Attribution"]
    assert not list((run / "report" / "tables").glob("op_groups_*.csv"))
    zh = (run / "report" / "report.zh.md").read_text()
    assert "Nsight Systems 内核汇总" in zh and "不可用：内核汇总既不含启动顺序，也不含框架算子。" in zh


def test_rerender_gives_the_same_tables(run):
    before = (run / "report" / "tables" / "kernels_decode.csv").read_text()
    rerender(run, 20)
    assert (run / "report" / "tables" / "kernels_decode.csv").read_text() == before


def test_bad_input_leaves_no_run_directory(tmp_path):
    bad = tmp_path / "decode.csv"
    bad.write_text('"Total Time (ns)","Instances","Name"\n100,many,k\n', encoding="utf-8")
    out = tmp_path / "run"
    with pytest.raises(UserError, match="line 2: cannot read Instances value 'many'"):
        import_nsys_stats([STAGES["prefill"], bad], out, tmp_path)
    assert not out.exists() and not list(tmp_path.glob(".run*"))
    with pytest.raises(UserError, match="no nsys stats files"):
        import_nsys_stats([], out, tmp_path)
