"""Timings carry their spread: two identical CPU `profile` runs; the report gives min, median, max and the
coefficient of variation over the repeats, the ranges' overhead is called noise when the two modes overlap, and
`compare` says which changes exceed the spread of both runs. Expected values are computed here from run.json and
kernels.parquet."""

from __future__ import annotations

import json
import math
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


def _allowance(values: list[float], centre: float) -> float | None:
    """The documented noise of one run's repeats (docs/compare.md, "Noise"): 3 robust standard deviations of one
    repeat from successive differences, 1.4826 · median |Δ| / √2, relative to the value."""
    if len(values) < 2 or not centre:
        return None
    return 3 * 1.4826 * statistics.median(abs(b - a) for a, b in zip(values, values[1:], strict=False)) / math.sqrt(2) / centre


def _verdict(base: list[float], cand: list[float], base_value: float, cand_value: float, higher_is_better=False):
    """The documented rule: the change against max(3%, either run's noise); (direction, threshold)."""
    noises = [n for n in (_allowance(base, base_value), _allowance(cand, cand_value)) if n is not None]
    threshold = max([0.03, *noises])
    change = cand_value / base_value - 1
    if abs(change) <= threshold:
        return "within noise", threshold
    if higher_is_better:
        return ("higher" if change > 0 else "lower"), threshold
    return ("slower" if change > 0 else "faster"), threshold


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
def test_range_overhead_is_judged_by_the_one_rule(twin_runs):
    for run in twin_runs:
        t = _timings(run)
        text = (run / "report" / "report.md").read_text()
        plain, annotated = t["plain"]["e2e_ms_all"], t["annotated"]["e2e_ms_all"]
        direction, _ = _verdict(plain, annotated, statistics.median(plain), statistics.median(annotated))
        noisy = json.loads((run / "summary.json").read_text())["noise"]["noisy"]
        within = direction == "within noise"
        assert ("the ranges cost nothing measurable here" in text) == (within and not noisy)
        assert ("the ranges' cost cannot be measured" in text) == (within and noisy)
        assert ("add " + f"{t['annotation_overhead_pct']:.1f}%" in text) == (not within and t["annotation_overhead_pct"] >= 0)


@pytest.mark.slow
def test_compare_and_check_give_one_verdict(twin_runs, tmp_path):
    out = tmp_path / "cmp"
    result = kernelscope("compare", *map(str, twin_runs), "--labels", "a,b", "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    text = (out / "compare.md").read_text()
    a, b = (_timings(r)["plain"] for r in twin_runs)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    expected = {}
    for metric, key, value in (("Time to first token (median", "ttft_ms_all", "ttft_ms"),
                               ("Time per output token (median", "tpot_ms_all", "tpot_ms"),
                               ("End-to-end generation (median", "e2e_ms_all", "e2e_ms")):
        row = next(line for name, line in rows.items() if name.startswith(metric))
        direction, threshold = _verdict(a[key], b[key], a[value], b[value])
        expected[value] = direction
        assert row.rstrip(" |").endswith(f"{direction} (±{100 * threshold:.1f}%)"), row
    # The headline's decode ratio with its verdict, from the two runs' step times (mean per step).
    steps = [pl.read_parquet(r / "kernels.parquet").filter(pl.col("phase") == "decode")
             .group_by("step").agg(pl.col("dur_ns").sum()).sort("step")["dur_ns"].to_list() for r in twin_runs]
    direction, threshold = _verdict(steps[0], steps[1], statistics.fmean(steps[0]), statistics.fmean(steps[1]))
    headline = next(line for line in text.splitlines() if line.startswith("- Decode:"))
    assert "mean CPU op time per step" in headline
    assert f"({direction.capitalize()}: a change of" in headline and f"±{100 * threshold:.1f}%" in headline
    # One prefill step per run: no noise to judge by; the floor alone, and said so.
    assert re.search(r"- Prefill: .*the floor alone: the noise is unknown", text)
    # check (the runs are alike: no flag needed) holds TPOT and TTFT to the same verdicts.
    summary = tmp_path / "check.md"
    result = kernelscope("check", str(twin_runs[1]), "--baseline", str(twin_runs[0]), "--summary", str(summary))
    assert result.returncode in (0, 1), result.stderr
    lines = summary.read_text().splitlines()
    for metric, key in (("TPOT", "tpot_ms"), ("TTFT", "ttft_ms")):
        row = next(line for line in lines if line.startswith(f"| {metric} (median)"))
        word = {"slower": "**regressed**", "faster": "improved", "within noise": "ok"}[expected[key]]
        assert row.rstrip().endswith(f"| {word} |"), row
    decode = next(line for line in lines if line.startswith("| decode mean device time per step"))
    word = {"slower": "**regressed**", "faster": "improved", "within noise": "ok"}[direction]
    assert decode.rstrip().endswith(f"| {word} |") and f"{100 * threshold:.1f}%" in decode, decode
