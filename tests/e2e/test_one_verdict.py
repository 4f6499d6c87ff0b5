"""One definition per metric and one verdict rule, on the committed H100 runs of one workload at batch 1 and 8:
`compare`, `check`, the report and the Python API agree; runs of different batch sizes are said not to compare
(first by `compare`, refused by `check` unless asked); a noisy run says so first and in summary.json. Expected
values are computed here from run.json and kernels.parquet with the documented rule (docs/compare.md, "Noise")."""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import kernelscope

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
B1, B8 = RUNS / "h100-qwen2-1.5b-b1-slim", RUNS / "h100-qwen2-1.5b-b8-slim"


def _allowance(values: list[float], centre: float) -> float | None:
    if len(values) < 2:
        return None
    return 3 * 1.4826 * statistics.median(abs(b - a) for a, b in zip(values, values[1:], strict=False)) / math.sqrt(2) / centre


def _plain(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["timings"]["plain"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("verdict") / "cmp"
    result = kernelscope("compare", str(B1), str(B8), "--out", str(out), "--figure-formats", "none")
    assert result.returncode == 0, result.stderr
    return out


def test_tokens_per_second_is_judged_on_its_own_repeats(comparison):
    # Each repeat's tokens/s is its tokens over its end-to-end time: batch · new tokens / e2e.
    values = {}
    for label, run in (("b1", B1), ("b8", B8)):
        info = json.loads((run / "run.json").read_text())
        tokens = info["workload"]["batch_size"] * info["workload"]["new_tokens"]
        values[label] = ([tokens / (e / 1e3) for e in _plain(run)["e2e_ms_all"]], _plain(run)["tokens_per_s"])
    (a, a_value), (b, b_value) = values["b1"], values["b8"]
    threshold = max(0.03, _allowance(a, a_value), _allowance(b, b_value))
    assert b_value / a_value - 1 > threshold  # 44.2 → 272.5 tokens/s: far beyond the noise
    rows = list(csv.DictReader((comparison / "tables" / "timings.csv").open()))
    row = next(r for r in rows if r["metric"] == "tokens_per_s")
    assert row["verdict[b8/b1]"] == "higher" and row["significant[b8/b1]"] == "true"
    assert float(row["threshold_pct[b8/b1]"]) == pytest.approx(100 * threshold)
    # End to end took longer at batch 8, but within its noise: the verdicts are the metrics' own.
    e2e = next(r for r in rows if r["metric"] == "e2e_ms")
    e2e_a, e2e_b = _plain(B1)["e2e_ms_all"], _plain(B8)["e2e_ms_all"]
    e2e_threshold = max(0.03, _allowance(e2e_a, _plain(B1)["e2e_ms"]), _allowance(e2e_b, _plain(B8)["e2e_ms"]))
    assert abs(_plain(B8)["e2e_ms"] / _plain(B1)["e2e_ms"] - 1) < e2e_threshold
    assert e2e["verdict[b8/b1]"] == "within noise"
    text = (comparison / "compare.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| Tokens per second, end to end (median"))
    assert line.rstrip(" |").endswith(f"higher (±{100 * threshold:.1f}%)")


def test_compare_says_first_that_the_runs_are_not_like_for_like(comparison):
    for name, words in (("compare.md", "**Not like for like:** the runs differ in batch size (b1: 1, b8: 8)"),
                        ("compare.zh.md", "**不是同条件对比：**")):
        lines = [x for x in (comparison / name).read_text().splitlines() if x.strip()]
        assert lines[0].startswith("# ") and lines[1].startswith(words), lines[:2]


def test_check_refuses_runs_that_do_not_compare_unless_asked(tmp_path):
    summary = tmp_path / "check.md"
    result = kernelscope("check", str(B8), "--baseline", str(B1), "--summary", str(summary))
    assert result.returncode == 2 and not summary.exists()
    assert result.stderr.count("\n") == 1 and "not comparable" in result.stderr and "batch size 1" in result.stderr
    assert "--allow-incomparable" in result.stderr
    result = kernelscope("check", str(B8), "--baseline", str(B1), "--summary", str(summary), "--allow-incomparable")
    assert result.returncode in (0, 1), result.stderr
    lines = [x for x in summary.read_text().splitlines() if x.strip()]
    assert lines[1].startswith("**Not like for like:** batch size 1 in")


def test_the_python_api_gives_the_verdicts_compare_gave(comparison):
    import kernelscope as ks

    verdicts = ks.verdicts(ks.open_run(B1), ks.open_run(B8))
    rows = {r["metric"]: r for r in csv.DictReader((comparison / "tables" / "timings.csv").open())}
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s", "decode_tokens_per_s", "e2e_ms"):
        assert verdicts[key].direction == rows[key]["verdict[b8/b1]"], key
        assert 100 * verdicts[key].threshold == pytest.approx(float(rows[key]["threshold_pct[b8/b1]"]))
    phases = {r["phase"]: r for r in csv.DictReader((comparison / "tables" / "phases.csv").open())}
    for phase in ("prefill", "decode"):
        assert verdicts[f"step:{phase}"].direction == phases[phase]["verdict[b8/b1]"]


@pytest.mark.slow
def test_a_noisy_run_says_so_first_and_in_its_summary(tmp_path):
    run = tmp_path / "b8"
    shutil.copytree(B8, run)
    result = kernelscope("report", str(run), "--figure-formats", "none")
    assert result.returncode == 0, result.stderr
    e2e = _plain(B8)["e2e_ms_all"]
    cv = statistics.stdev(e2e) / statistics.fmean(e2e)
    assert cv > 0.10  # this H100 run's end-to-end repeats vary by 18%
    noise = json.loads((run / "summary.json").read_text())["noise"]
    assert noise["noisy"] is True and noise["noisy_cv_pct"] == 10.0
    assert noise["metrics"]["e2e_ms"]["cv_pct"] == pytest.approx(100 * cv)
    assert noise["metrics"]["e2e_ms"]["repeats"] == 3 and noise["metrics"]["e2e_ms"]["statistic"] == "median"
    assert noise["metrics"]["e2e_ms"]["min"] == min(e2e) and noise["metrics"]["e2e_ms"]["max"] == max(e2e)
    lines = [x for x in (run / "report" / "report.md").read_text().splitlines() if x.strip()]
    assert lines[1].startswith("> **Noisy run.**") and f"End to end ranges from {min(e2e):,.3f} ms" in lines[1]
    assert f"(coefficient of variation {100 * cv:.1f}%)" in lines[1]
    zh = [x for x in (run / "report" / "report.zh.md").read_text().splitlines() if x.strip()]
    assert zh[1].startswith("> **波动大的运行。**")
    # The H200 run of the same workload varies by 5%: not noisy, no banner.
    quiet = tmp_path / "h200"
    shutil.copytree(RUNS / "h200-qwen2-1.5b-slim", quiet)
    assert kernelscope("report", str(quiet), "--figure-formats", "none").returncode == 0
    assert json.loads((quiet / "summary.json").read_text())["noise"]["noisy"] is False
    assert "Noisy run" not in (quiet / "report" / "report.md").read_text()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelscope", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_quiet_anywhere_and_the_three_line_headlines(tmp_path):
    out = tmp_path / "cmp"
    loud = _cli("compare", str(B1), str(B8), "--out", str(out), "--figure-formats", "none", "--lang", "en")
    assert loud.returncode == 0, loud.stderr
    lines = loud.stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == str(out.resolve())
    assert lines[0].startswith("kernelscope compare: b8 vs b1 (baseline) — not like for like: batch size")
    assert lines[1].startswith("mean time per step: prefill ") and "decode " in lines[1]
    assert lines[2] == f"report: {out.resolve() / 'compare.html'} (and compare.md beside it)"
    quiet = _cli("compare", str(B1), str(B8), "--out", str(tmp_path / "q"), "--figure-formats", "none", "-q")
    assert quiet.returncode == 0 and quiet.stdout.splitlines() == [str((tmp_path / "q").resolve())]
    summary = tmp_path / "check.md"
    check = _cli("check", str(B1), "--baseline", str(B1), "--summary", str(summary))
    tail = check.stdout.splitlines()[-3:]
    assert check.returncode == 0 and tail[0].startswith("kernelscope check: pass — 0 of ")
    assert tail[1].startswith("largest: ") and tail[2] == f"summary: {summary.resolve()}"
    quiet = _cli("check", str(B1), "--baseline", str(B1), "--summary", str(summary), "-q")
    assert quiet.stdout == summary.read_text()


def test_check_help_says_percent_once():
    result = _cli("check", "--help")
    assert result.returncode == 0 and "5%" in result.stdout and "%%" not in result.stdout


def test_a_closed_pipe_ends_quietly():
    names = "\n".join(f"void my_kernel_{i}<float>(float*)" for i in range(20000)) + "\n"
    head = subprocess.run(f"{sys.executable} -m kernelscope kernels | head -1; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", input=names, capture_output=True, text=True,
                          timeout=600)
    assert head.returncode == 0, head.stderr
    assert head.stdout.count("\n") == 1 and head.stderr == ""
