"""`kernelscope import` of an Nsight Systems SQLite export: written from a real H200 trace by a writer that
follows nsys's schema (tests/nsys_sqlite_writer.py), since the device's nsys cannot finish exports."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from kernelscope.load.kineto import load_kineto
from tests.conftest import KINETO
from tests.e2e.test_cli import kernelscope
from tests.nsys_sqlite_writer import write_nsys_sqlite


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nsys") / "qwen2-0.5b.sqlite"
    return write_nsys_sqlite(load_kineto(KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"), path, variant="nvtx-textid")


def _input_totals(path: Path) -> pl.DataFrame:
    """Per kernel name: total ns and launches, straight from the export's own tables."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT s.value, SUM(k.end - k.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value").fetchall()
    return pl.DataFrame(rows, schema={"name": pl.String, "total_ns": pl.Int64, "instances": pl.Int64}, orient="row")


@pytest.mark.slow
def test_import_gives_a_run_whose_kernel_tables_match_the_export(export, tmp_path):
    out = tmp_path / "run"
    result = kernelscope("import", str(export), "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["trace"]["format"] == "nsys-sqlite" and run["hardware"]["name"] == "NVIDIA H200"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["attribution_coverage"] == pytest.approx(1.0)  # phases and modules from the NVTX ranges
    tables = [pl.read_csv(out / "report" / "tables" / f"kernels_{phase}.csv") for phase in ("prefill", "decode")]
    kernels = pl.concat([t.filter(pl.col("kind") == "kernel") for t in tables])
    ours = kernels.group_by("name").agg(pl.col("total_ns").sum(), pl.col("instances").sum())
    theirs = _input_totals(export)
    joined = theirs.join(ours, on="name", how="full", suffix="_report")
    assert joined.height == theirs.height == ours.height
    assert (joined["total_ns"] == joined["total_ns_report"]).all()
    assert (joined["instances"] == joined["instances_report"]).all()
    text = (out / "report" / "report.md").read_text()
    assert "NVIDIA H200" in text and "## " in text


@pytest.mark.parametrize("content, message", [
    (b"SQLite format 3\x00" + b"\x00" * 200, "sqlite"),
    (None, "no CUPTI_ACTIVITY_KIND_KERNEL"),
])
def test_bad_sqlite_is_one_line_and_exit_2(content, message, tmp_path):
    path = tmp_path / "bad.sqlite"
    if content is None:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE foo (x INTEGER)")
    else:
        path.write_bytes(content)
    result = kernelscope("import", str(path), "--out", str(tmp_path / "never"))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and str(path) in line and "Traceback" not in line
    assert message.lower() in line.lower()
    assert not (tmp_path / "never").exists()
