"""Timings carry their spread: two identical CPU `profile` runs; the report gives min, median, max and the
coefficient of variation over the repeats, the ranges' overhead is called noise when the two modes overlap, and
`compare` says which changes exceed the spread of both runs. Expected values are computed here from run.json and
kernels.parquet."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import kernelscope

ARGS = ["--prompt-len", "32", "--new-tokens", "8", "--repeats", "4", "--warmup", "1"]


@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("noise")
    runs = [root / "a", root / "b"]
    for out in runs:
        result = kernelscope("profile", "--out", str(out), *ARGS)
        assert result.returncode == 0, result.stderr
    return runs


def _timings(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["timings"]


def _overlap(a: list[float], b: list[float]) -> bool:
    return not (max(a) < min(b) or max(b) < min(a))


@pytest.mark.slow
def test_report_gives_the_spread_of_every_timing(twin_runs):
    run = twin_runs[0]
    plain = _timings(run)["plain"]
    assert len(plain["e2e_ms_all"]) == len(plain["ttft_ms_all"]) == len(plain["tpot_ms_all"]) == 4
    text = (run / "report" / "report.md").read_text()
    for metric, values in (("TTFT", plain["ttft_ms_all"]), ("TPOT", plain["tpot_ms_all"]),
                           ("End to end", plain["e2e_ms_all"])):
        cv = 100 * statistics.stdev(values) / statistics.fmean(values)
        row = (f"| Plain | {metric} | 4 | {min(values):,.3f} ms | {statistics.median(values):,.3f} ms | "
               f"{max(values):,.3f} ms | {cv:.1f}% |")
        assert row in text, row
    zh = (run / "report" / "report.zh.md").read_text()
    assert "变异系数" in zh


@pytest.mark.slow
def test_range_overhead_is_noise_when_the_modes_overlap(twin_runs):
    for run in twin_runs:
        t = _timings(run)
        text = (run / "report" / "report.md").read_text()
        noise = _overlap(t["plain"]["e2e_ms_all"], t["annotated"]["e2e_ms_all"])
        assert ("the ranges cost nothing measurable here" in text) == noise
        assert ("add " + f"{t['annotation_overhead_pct']:.1f}%" in text) == (not noise and t["annotation_overhead_pct"] >= 0)


@pytest.mark.slow
def test_compare_marks_changes_within_noise(twin_runs, tmp_path):
    out = tmp_path / "cmp"
    result = kernelscope("compare", *map(str, twin_runs), "--labels", "a,b", "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    text = (out / "compare.md").read_text()
    a, b = (_timings(r)["plain"] for r in twin_runs)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    for metric, key in (("Time to first token", "ttft_ms_all"), ("Time per output token", "tpot_ms_all"),
                        ("End-to-end generation", "e2e_ms_all")):
        row = next(line for name, line in rows.items() if name.startswith(metric))
        expected = "within noise" if _overlap(a[key], b[key]) else "significant"
        assert row.rstrip(" |").endswith(expected), row
    # The headline's decode ratio with its verdict, from the two runs' step times.
    steps = [pl.read_parquet(r / "kernels.parquet").filter(pl.col("phase") == "decode")
             .group_by("step").agg(pl.col("dur_ns").sum())["dur_ns"].to_list() for r in twin_runs]
    headline = next(line for line in text.splitlines() if line.startswith("- Decode:"))
    if _overlap(*steps):
        assert "Within noise" in headline
    else:
        assert "Significant" in headline
    assert re.search(r"- Prefill: .*unknown", text)  # one prefill step per run: no spread to judge by
