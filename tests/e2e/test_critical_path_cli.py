"""The critical path as a user meets it: `import` keeps the runtime calls that launched nothing (calls.parquet) and
writes every step's path (critical_path.parquet, summary.json `critical_path`, the report's section, figure and
tables/critical_path_<phase>.csv in both languages), `query` sees it, and `whatif --speedup` re-times it; every
number checked here against the trace file (plain json)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import kernelscope
from tests.step_reference import RUNTIME, _document, step_walls

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
COLUMNS = ["phase", "generation", "step", "rank", "start_ns", "dur_ns", "class", "kind", "name", "module", "layer",
           "op", "kernel_id", "edge", "stream", "tid"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "qwen"
    result = kernelscope("import", str(TRACE), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_calls_that_launched_nothing_are_kept(run):
    events = [e for e in _document(TRACE)["traceEvents"] if e.get("ph") == "X"]
    device = {e["args"]["correlation"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    idle = [e for e in events if e.get("cat") in RUNTIME and e["args"].get("correlation") not in device]
    calls = pl.read_parquet(run / "calls.parquet")
    assert calls.height == len(idle) > 0
    assert sorted(calls["api"].to_list()) == sorted(e["name"] for e in idle)
    assert calls.filter(pl.col("api") == "cudaStreamSynchronize").height == sum(
        e["name"] == "cudaStreamSynchronize" for e in idle) > 0


def test_summary_report_and_tables_hold_every_steps_path(run):
    walls = step_walls([TRACE], "ks")
    phases = [e["name"].split(":")[1] for e in _document(TRACE)["traceEvents"]
              if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ks.phase:")]
    summary = json.loads((run / "summary.json").read_text())["critical_path"]
    assert {p: summary[p]["steps"] for p in summary} == {p: phases.count(p) for p in set(phases)}
    assert sum(summary[p]["step_ns"] for p in summary) == pytest.approx(sum(walls), rel=0.01)
    for entry in summary.values():
        assert entry["path_ns"] == entry["step_ns"]
        assert set(entry["shares"]) == {"compute", "communication", "wait", "launch", "host"}
        assert sum(entry["shares"].values()) == pytest.approx(1.0)
    segments = pl.read_parquet(run / "critical_path.parquet")
    assert segments.columns == COLUMNS
    assert int(segments["dur_ns"].sum()) == sum(summary[p]["path_ns"] for p in summary)
    for phase in summary:
        table = pl.read_csv(run / "report" / "tables" / f"critical_path_{phase}.csv")
        assert table.columns == COLUMNS and table.height == segments.filter(pl.col("phase") == phase).height
    for doc, figure, heading in (("report.md", "figures/critical_path.png", "## Critical path"),
                                 ("report.zh.md", "figures/critical_path.zh.png", "## 关键路径")):
        text = (run / "report" / doc).read_text(encoding="utf-8")
        assert heading in text and f"]({figure})" in text
        assert (run / "report" / figure).is_file()


def test_query_sees_the_critical_path(run):
    result = kernelscope("query", "select phase, count(*) as n, sum(dur_ns) as ns from critical_path group by phase "
                         "order by phase", str(run), "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(pl.read_csv(result.stdout.encode()).iter_rows())
    segments = pl.read_parquet(run / "critical_path.parquet")
    expected = segments.group_by("phase").agg(pl.len(), pl.col("dur_ns").sum()).sort("phase").rows()
    assert rows == [tuple(r) for r in expected]


def test_whatif_speedup_retimes_every_step(run, tmp_path):
    out = tmp_path / "faster"
    result = kernelscope("whatif", str(run), "--speedup", "launch=2", "--speedup", "host=2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    study = json.loads((out / "speedup.json").read_text())
    assert [s["target"] for s in study["speedups"]] == ["launch", "host"]
    summary = json.loads((run / "summary.json").read_text())["critical_path"]
    for phase in study["phases"]:
        measured = summary[phase["phase"]]
        assert phase["step_ns"] == measured["step_ns"]
        # This run's steps are decided by the host: twice as fast a host halves them.
        host_share = measured["shares"]["launch"] + measured["shares"]["host"]
        assert phase["saved_ns"] / phase["step_ns"] == pytest.approx(host_share / 2, abs=0.01)
    assert (out / "tables" / "speedup_steps.csv").is_file() and (out / "tables" / "critical_path_decode.csv").is_file()


@pytest.mark.parametrize("args, words", [
    (["--speedup", "compute=0"], "the factor must be above 0"),
    (["--speedup", "compute=fast"], "is not a number"),
    (["--speedup", "=2"], "give TARGET=FACTOR"),
    (["--speedup", "compute"], "give TARGET=FACTOR"),
    (["--speedup", "no_such_kernel=2"], "names no kernel, module or class"),
    (["--speedup", "compute=2", "--hw", "h100"], "does not combine with --hw"),
])
def test_bad_speedups_are_refused_in_one_line(run, args, words):
    result = kernelscope("whatif", str(run), *args)
    assert result.returncode == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_cpu_run_is_refused(tmp_path):
    out = tmp_path / "cpu"
    trace = DATA / "public" / "hta" / "data__rank_non_gpu__rank_non_gpu.json.gz"
    assert kernelscope("import", str(trace), "--out", str(out), "--no-report").returncode == 0
    result = kernelscope("whatif", str(out), "--speedup", "host=2")
    assert result.returncode == 2 and "a CPU run" in result.stderr
