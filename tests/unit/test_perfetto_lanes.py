"""`export --format perfetto` keeps every slice where a trace viewer shows it: on every track of the exported file the
complete slices nest (Perfetto drops one that overlaps another without nesting), and device events of one stream do
not overlap at all; events that would are on extra lanes of their track. Checked on every public trace and the
committed H200 traces, whose cuBLASLt split-K reduce kernels start before their GEMM ends (programmatic dependent
launch) and whose serving-engine ranges cross their ops, by reading the exported file with the standard library
(tests/trace_reference.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.commands.export import export_run
from kernelscope.commands.importers.traces import import_traces
from kernelscope.errors import UserError
from tests.audit_reference import audit_reference, crossing_slices
from tests.tiers import large_files_slow

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = sorted((DATA / "public").rglob("*.json*")) + sorted((DATA / "kineto").glob("*.trace.json.gz"))


def _export(path: Path, tmp_path: Path) -> tuple[Path, Path] | None:
    try:
        run = import_traces([path], tmp_path / "run", tmp_path, report=False, jobs=1)
    except UserError:  # not a trace of kernels or CPU ops: nothing to export
        return None
    return run, export_run(run, "perfetto", tmp_path / "trace.json.gz")


@pytest.mark.parametrize("path", large_files_slow(TRACES), ids=lambda p: p.name[:60])
def test_slices_nest_on_every_track_and_none_is_lost(path, tmp_path):
    exported = _export(path, tmp_path)
    if exported is None:
        pytest.skip("refused on import")
    run, trace = exported
    found = crossing_slices(trace)
    assert found["crossing"] == 0 and found["device_overlaps"] == 0
    # Every device event, launching call and op of the run is a slice of the file.
    kernels = pl.read_parquet(run / "kernels.parquet")
    device = kernels.filter((pl.col("kind") != "cpu_op") & pl.col("start_ns").is_not_null())
    calls = device.filter(pl.col("launch_api").is_not_null() & pl.col("launch_start_ns").is_not_null()).unique(
        ["correlation", "pid", "tid", "launch_start_ns", "launch_api"])
    ops = pl.read_parquet(run / "ops.parquet").filter(pl.col("start_ns").is_not_null())
    assert found["slices"] == device.height + calls.height + ops.height


def test_kernels_that_overlap_under_pdl_go_on_extra_lanes_of_their_stream(tmp_path):
    path = DATA / "kineto" / "h200-llama-3-8b-p16-n3.trace.json.gz"
    overlaps = audit_reference(path)["stream_overlaps"]
    assert overlaps > 0  # in the file: split-K reduce kernels starting inside their GEMM on one stream
    _, trace = _export(path, tmp_path)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    lanes = [e for e in kernels if e["tid"] != e["args"]["stream"]]
    assert len(lanes) == overlaps
    assert all(names[(e["pid"], e["tid"])] == f"stream {e['args']['stream']} (overlap lane 1)" for e in lanes)
    assert all("splitKreduce" in e["name"] for e in lanes)
    # The flow from each launch ends on the lane where its kernel now is.
    ends = {e["id"]: (e["pid"], e["tid"]) for e in events if e.get("ph") == "f"}
    assert all(ends[e["args"]["correlation"]] == (e["pid"], e["tid"]) for e in lanes)


def _same_stream_overlaps(events: list[dict]) -> int:
    """Device events that start before an earlier one on their stream ends, by the events' own times."""
    count, ends = 0, {}
    for e in sorted(events, key=lambda e: (e["args"]["stream"], e["ts"])):
        end = ends.get(e["args"]["stream"])
        count += end is not None and e["ts"] < end
        ends[e["args"]["stream"]] = max(end or e["ts"], e["ts"] + e["dur"])
    return count


def test_engine_run_with_pdl_nests_and_keeps_every_overlap_on_lanes(tmp_path):
    """kernelscope's engine with programmatic dependent launch (committed H200 capture): most of its kernels start
    before the previous one on their stream ends. The export keeps those times as they are (the same overlaps in
    the exported file as in the trace) and puts the overlapping kernels on lanes, so every track nests."""
    path = DATA / "kineto" / "h200-engine-qwen2-0.5b-pdl.trace.json.gz"
    source = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    device = [e for e in source if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    in_file = _same_stream_overlaps(device)
    assert in_file > len(device) // 2  # PDL: the trace is mostly overlaps, not an odd one
    assert audit_reference(path)["stream_overlaps_pdl"] == in_file
    _, trace = _export(path, tmp_path)
    found = crossing_slices(trace)
    assert found["crossing"] == 0 and found["device_overlaps"] == 0
    exported = [e for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
                if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(exported) == len(device)
    assert _same_stream_overlaps(exported) == in_file
    assert any(e["tid"] != e["args"]["stream"] for e in exported)
