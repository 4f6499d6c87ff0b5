"""`kernelscope export`: nsys-shaped kernel summaries and Chrome traces, from a real H200 run directory."""

import csv
import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from kernelscope.commands.export import export_run
from kernelscope.commands.importers.traces import import_traces
from kernelscope.errors import UserError
from tests.conftest import DATA, write_trace

SOURCE_RUN = DATA / "runs" / "h200-qwen2-0.5b-ncu"
NSYS_HEADER = ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
               "StdDev (ns)", "Name"]
OUR_COLUMNS = ["Library", "Category", "Friendly Name"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A copy of the committed run (exports are written into the run directory)."""
    path = tmp_path_factory.mktemp("export") / "run"
    shutil.copytree(SOURCE_RUN, path)
    return path


@pytest.fixture(scope="module")
def kernels(run) -> pl.DataFrame:
    return pl.read_parquet(run / "kernels.parquet")


@pytest.fixture(scope="module")
def trace(run) -> dict:
    path = export_run(run, "perfetto", None)
    assert path == run / "export" / "trace.perfetto.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


def _launches(rows: pl.DataFrame) -> pl.Expr:
    """Launches of the rows in a group (a row may stand for several: its `instances`, null meaning 1)."""
    return pl.col("instances").fill_null(1).sum() if "instances" in rows.columns else pl.len()


def _expected(kernels: pl.DataFrame) -> dict[str, tuple[int, int]]:
    rows = kernels.filter(pl.col("kind") == "kernel")
    sums = rows.group_by("name").agg(pl.col("dur_ns").sum(), _launches(rows).alias("n"))
    return {r["name"]: (r["dur_ns"], r["n"]) for r in sums.iter_rows(named=True)}


# ------------------------------------------------------------------------------------------------ kern-sum


def test_kern_sum_has_nsys_columns_then_ours_and_the_run_totals(run, kernels):
    path = export_run(run, "kern-sum", None)
    assert path == run / "export" / "kern_sum.csv"
    header, rows = _read_csv(path)
    assert header == NSYS_HEADER + OUR_COLUMNS
    expected = _expected(kernels)
    assert {r["Name"]: (int(r["Total Time (ns)"]), int(r["Instances"])) for r in rows} == expected
    assert not any(r["Name"].startswith(("Memcpy", "Memset")) for r in rows)  # other nsys reports
    assert sum(float(r["Time (%)"]) for r in rows) == pytest.approx(100, abs=0.05 * len(rows))
    totals = [int(r["Total Time (ns)"]) for r in rows]
    assert totals == sorted(totals, reverse=True)
    for r in rows:  # the number formats nsys prints
        assert re.fullmatch(r"\d+\.\d", r["Time (%)"]) and re.fullmatch(r"\d+\.\d", r["Avg (ns)"])
        assert re.fullmatch(r"\d+\.\d", r["Med (ns)"]) and re.fullmatch(r"\d+\.\d", r["StdDev (ns)"])
        assert r["Min (ns)"].isdigit() and r["Max (ns)"].isdigit()
        assert int(r["Min (ns)"]) <= float(r["Avg (ns)"]) <= int(r["Max (ns)"])
    top = rows[0]
    assert top["Library"] and top["Category"] and top["Friendly Name"]
    gemm = next(r for r in rows if r["Name"].startswith("nvjet_"))
    assert (gemm["Library"], gemm["Category"]) == ("cuBLASLt", "GEMM")


def test_kern_sum_of_one_phase(run, kernels):
    path = export_run(run, "kern-sum", None, phase="decode")
    assert path.name == "kern_sum_decode.csv"
    _, rows = _read_csv(path)
    expected = _expected(kernels.filter(pl.col("phase") == "decode"))
    assert {r["Name"]: (int(r["Total Time (ns)"]), int(r["Instances"])) for r in rows} == expected
    assert sum(float(r["Time (%)"]) for r in rows) == pytest.approx(100, abs=0.05 * len(rows))


def test_kern_sum_nvtx_groups_by_phase_range(run, kernels):
    path = export_run(run, "kern-sum-nvtx", None)
    header, rows = _read_csv(path)
    assert header == ["NVTX Range", *NSYS_HEADER, *OUR_COLUMNS]
    ranges = [r["NVTX Range"] for r in rows]
    assert ranges == sorted(ranges, key=["ks.phase:prefill", "ks.phase:decode"].index)  # prefill first
    for phase in ("prefill", "decode"):
        group = [r for r in rows if r["NVTX Range"] == f"ks.phase:{phase}"]
        expected = _expected(kernels.filter(pl.col("phase") == phase))
        assert {r["Name"]: (int(r["Total Time (ns)"]), int(r["Instances"])) for r in group} == expected
        assert sum(float(r["Time (%)"]) for r in group) == pytest.approx(100, abs=0.05 * len(group))


# ------------------------------------------------------------------------------------------------ perfetto


def test_trace_is_a_chrome_trace_perfetto_reads(trace, run):
    """The rules of Perfetto's JSON importer: every event has a phase; X events need numeric ts and dur;
    pid and tid are integers that fit 32 bits; args is an object; M events name something."""
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] == "ns"
    source = json.loads((run / "run.json").read_text())["trace"]
    assert trace["deviceProperties"] == source["device_properties"]
    phases = Counter()
    for event in trace["traceEvents"]:
        phases[event["ph"]] += 1
        assert event["ph"] in {"X", "s", "f", "M"}
        assert isinstance(event["pid"], int) and 0 <= event["pid"] < 2**32
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name"} and event["args"]["name"]
            continue
        assert isinstance(event["tid"], int) and 0 <= event["tid"] < 2**32
        assert isinstance(event["ts"], float | int)
        if event["ph"] == "X":
            assert isinstance(event["dur"], float | int) and event["dur"] >= 0
            assert isinstance(event["args"], dict) and isinstance(event["name"], str)
    assert phases["X"] > 0 and phases["s"] == phases["f"] > 0


def test_trace_kernels_carry_kineto_fields_and_attribution(trace, kernels, run):
    events = [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(events) == kernels.height
    assert Counter(e["cat"] for e in events) == {
        "kernel": kernels.filter(pl.col("kind") == "kernel").height,
        "gpu_memcpy": kernels.filter(pl.col("kind") == "memcpy").height,
        "gpu_memset": kernels.filter(pl.col("kind") == "memset").height,
    }
    origin_us = json.loads((run / "run.json").read_text())["trace"]["origin_us"]
    by_id = {e["args"]["ks.kernel_id"]: e for e in events}
    for row in kernels.iter_rows(named=True):
        event = by_id[row["kernel_id"]]
        args = event["args"]
        assert event["name"] == row["name"] and (event["pid"], event["tid"]) == (row["device"], row["stream"])
        assert event["ts"] == pytest.approx(origin_us + row["start_ns"] / 1e3, abs=2e-3)
        assert round(event["dur"] * 1e3) == row["dur_ns"]
        assert (args["correlation"], args["External id"]) == (row["correlation"], row["external_id"])
        if row["kind"] == "kernel":
            assert args["grid"] == [row["grid_x"], row["grid_y"], row["grid_z"]]
            assert args["block"] == [row["block_x"], row["block_y"], row["block_z"]]
            assert args["registers per thread"] == row["registers_per_thread"]
        else:
            assert args["bytes"] == row["bytes"] and "grid" not in args
        for column in ("phase", "step", "layer", "module", "op", "top_op"):
            if row[column] is None:
                assert f"ks.{column}" not in args  # nulls are left out
            else:
                assert args[f"ks.{column}"] == row[column]
        assert args["ks.library"] and args["ks.category"] and args["ks.friendly_name"]


def test_trace_flows_join_each_launch_to_its_kernel(trace):
    events = trace["traceEvents"]
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    kernels = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(runtime) and {e["id"] for e in ends} == set(starts)
    for start in starts.values():  # a flow starts inside its runtime call, on its thread
        call = runtime[start["id"]]
        assert (start["pid"], start["tid"]) == (call["pid"], call["tid"])
        assert call["ts"] <= start["ts"] <= call["ts"] + call["dur"]
        assert (start["cat"], start["name"]) == ("ac2g", "ac2g")
    for end in ends:  # and ends on the kernel that starts there
        assert (end["pid"], end["tid"], end["ts"]) in kernels
        assert (end["bp"], end["cat"], end["name"]) == ("e", "ac2g", "ac2g")


def test_trace_has_cpu_ops_with_shapes_and_annotation_ranges(trace, run):
    ops = pl.read_parquet(run / "ops.parquet")
    events = [e for e in trace["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
    assert len(events) == ops.height
    assert Counter(e["cat"] for e in events)["user_annotation"] == ops.filter(pl.col("cat") == "annotation").height
    shaped = ops.filter(pl.col("input_dims").is_not_null()).row(0, named=True)
    event = next(e for e in events if e["name"] == shaped["name"] and "Input Dims" in e["args"])
    assert event["args"]["Input Dims"] == json.loads(shaped["input_dims"])
    assert event["args"]["Input type"] == json.loads(shaped["input_types"])
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"GPU 0", "stream 7"} <= names


def test_names_that_need_escaping_survive_both_formats(tmp_path):
    """A run imported from a small trace whose kernel name holds quotes, commas, a backslash and non-ASCII."""
    name = 'void k<"a", b>(x\\y) µ'
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 20.0,
         "args": {"External id": 5, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12.0, "dur": 3.0,
         "args": {"External id": 5, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 16.5, "dur": 2.25,
         "args": {"External id": 5, "correlation": 9, "device": 0, "stream": 7, "grid": [4, 1, 1],
                  "block": [128, 1, 1]}},
    ]
    run = import_traces([write_trace(tmp_path / "t.json", events)], tmp_path / "run", tmp_path, report=False)
    header, rows = _read_csv(export_run(run, "kern-sum", None))
    assert [r["Name"] for r in rows] == [name] and rows[0]["Total Time (ns)"] == "2250"
    with gzip.open(export_run(run, "perfetto", None), "rt", encoding="utf-8") as f:
        exported = json.load(f)["traceEvents"]
    kernel = next(e for e in exported if e.get("cat") == "kernel")
    assert kernel["name"] == name and kernel["args"]["ks.op"] == "aten::mm"
    assert kernel["ts"] == pytest.approx(16.5) and kernel["dur"] == pytest.approx(2.25)


# ------------------------------------------------------------------------------------------------ output, errors


def test_out_names_a_file_or_a_directory_and_nothing_partial_is_left(run, tmp_path):
    file = export_run(run, "kern-sum", tmp_path / "deep" / "sum.csv")
    assert file == tmp_path / "deep" / "sum.csv" and file.is_file()
    inside = export_run(run, "perfetto", tmp_path)
    assert inside == tmp_path / "trace.perfetto.json.gz"
    assert not [p for p in tmp_path.rglob("*") if ".partial-" in p.name]
    assert not [p for p in (run / "export").iterdir() if ".partial-" in p.name]


@pytest.mark.parametrize(
    ("fmt", "phase", "message"),
    [
        ("nsys-rep", None, "unknown export format 'nsys-rep'"),
        ("kern-sum", "verify", "no kernels in phase verify"),
        ("kern-sum-nvtx", "verify", "no kernels in phase verify"),
        ("perfetto", "decode", "--phase applies to the kern-sum formats only"),
    ],
)
def test_bad_requests_raise_one_clear_error(run, tmp_path, fmt, phase, message):
    with pytest.raises(UserError, match=re.escape(message)):
        export_run(run, fmt, tmp_path / "out.file", phase=phase)
    assert not list(tmp_path.iterdir())


def test_missing_or_foreign_run_directories_raise(tmp_path):
    with pytest.raises(UserError, match="no such run directory"):
        export_run(tmp_path / "absent", "kern-sum", None)
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match="not a kernelscope run directory"):
        export_run(tmp_path / "plain", "perfetto", None)
    assert not (tmp_path / "plain" / "export").exists()


def test_a_run_without_start_times_has_no_trace(run, tmp_path):
    """Runs whose rows are summaries (no start times) still give a kernel summary, but no timeline."""
    copy = tmp_path / "summary-run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("export"))
    kernels = pl.read_parquet(copy / "kernels.parquet")
    kernels.with_columns(pl.lit(None, dtype=pl.Int64).alias("start_ns")).write_parquet(copy / "kernels.parquet")
    with pytest.raises(UserError, match="no start times"):
        export_run(copy, "perfetto", None)
    assert not (copy / "export").exists() or not list((copy / "export").iterdir())
    _, rows = _read_csv(export_run(copy, "kern-sum", None))
    assert {r["Name"]: (int(r["Total Time (ns)"]), int(r["Instances"])) for r in rows} == _expected(kernels)
