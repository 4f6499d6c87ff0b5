"""Real public traces (tests/data/public, README there) read right: every launch, its duration and name as the file
holds them (tests/trace_reference.py, plain json), whatever the file's layout; ranks never mixed; old torch
traces attributed; runs without device activity say so."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.ranks.ranks import combine_ranks
from kernelscope.analyze.summary import summarize
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.load.kineto import load_kineto
from kernelscope.load.sources import read_trace
from tests.audit_reference import audit_reference
from tests.tiers import large_files_slow
from tests.trace_reference import read_events, reference

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public"
TRACES = sorted(p for p in PUBLIC.rglob("*.json*"))
RANKS = [PUBLIC / "hta" / f"data__trace_filter__sampled_rank-{i}.json.gz" for i in (0, 1)]


def _device_totals(kernels: pl.DataFrame) -> dict[str, tuple[int, int]]:
    device = kernels.filter(pl.col("kind") != "cpu_op")
    return {name: (count, total) for name, count, total in
            device.group_by("name").agg(pl.len(), pl.col("dur_ns").sum()).iter_rows()}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
@pytest.mark.slow
def test_every_launch_as_the_file_holds_it(path):
    kernels, _ = attribute(read_trace(path))
    expected = reference(path)
    device = kernels.filter(pl.col("kind") != "cpu_op")
    assert device.height == expected.launches
    assert int(device["dur_ns"].sum()) == expected.device_ns
    assert _device_totals(kernels) == expected.by_name


AUDITED = TRACES + sorted((Path(__file__).resolve().parents[1] / "data" / "kineto").glob("*.trace.json.gz"))


@pytest.mark.parametrize("path", large_files_slow(AUDITED), ids=lambda p: p.name[:60])
def test_the_integrity_audit_counts_what_the_file_holds(path):
    import msgspec

    from kernelscope.analyze.integrity import audit_trace

    audit = msgspec.to_builtins(audit_trace(read_trace(path)))
    expected = audit_reference(path)
    assert {key: audit[key] for key in expected} == expected


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
@pytest.mark.slow
def test_busy_time_is_the_union_the_file_holds(path):
    """Busy time (the phase table's, over the whole trace) against the union of the file's own intervals per device,
    or of its CPU ops' whole calls per thread in a file without device activity (tests/trace_reference.py). The
    file's times are µs with fractions: each busy stretch's ends are rounded to whole ns, so the two may differ by
    up to a ns per stretch."""
    from kernelscope.analyze.structure.phases import busy_ns

    kernels, _ = attribute(read_trace(path))
    expected = reference(path)
    assert expected.busy_ns is not None
    assert abs(busy_ns(kernels) - expected.busy_ns) <= expected.busy_stretches


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
@pytest.mark.slow
def test_launch_calls_are_the_files_kernel_launches_each_once(path):
    """The phase table's launch calls (over the whole trace) against the file's runtime calls that launched kernels,
    each once (tests/trace_reference.py): a graph launch is one call, a synchronous copy's call is none."""
    from kernelscope.analyze.structure.phases import launch_calls

    kernels, _ = attribute(read_trace(path))
    calls = reference(path).kernel_launch_calls_ns
    table = launch_calls(kernels.with_columns(pl.lit("whole trace").alias("phase")))
    if not calls:
        assert table.height == 0
        return
    row = table.row(0, named=True)
    assert row["mean_launch_ns"] == pytest.approx(statistics.mean(calls), rel=1e-12)
    assert row["median_launch_ns"] == pytest.approx(statistics.median(calls), rel=1e-12)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:60])
@pytest.mark.slow
def test_idle_gaps_are_the_gaps_between_the_files_busy_stretches(path):
    """Idle gaps (over the whole trace) against the gaps between the union of the file's intervals per device
    (tests/trace_reference.py). The file's times are µs with fractions and each gap's two ends are rounded to ns, so
    a gap may differ by up to 2 ns, and one under 3 ns may be found on one side only."""
    from kernelscope.analyze.idle_gaps import idle_gaps

    kernels, _ = attribute(read_trace(path))
    expected = reference(path).idle_gaps_ns
    found = idle_gaps(kernels.with_columns(pl.lit("whole trace").alias("phase")), top=10)
    if found is None:
        assert all(gap <= 2 for gap in expected)
        return
    count, total = int(found.per_phase["gaps"].sum()), int(found.per_phase["idle_ns"].sum())
    assert sum(gap > 2 for gap in expected) <= count <= len(expected)
    assert abs(total - sum(expected)) <= 2 * max(count, len(expected))
    largest = found.largest["gap_ns"].to_list()
    assert len(largest) == min(10, count)
    assert all(abs(ours - theirs) <= 2 for ours, theirs in zip(largest, expected, strict=False))
    # The share of the gaps' time before the host called the launch that ended them (rounded ends: 0.01 points).
    ref = reference(path)
    if ref.gap_with_call_ns:
        ours = found.per_phase["host_wait_pct"][0]
        assert abs(ours - 100.0 * ref.gap_host_wait_ns / ref.gap_with_call_ns) <= 0.01
    # Where one gap is clearly the largest: the events around it, and how long after it began the host called the
    # launch that ended it.
    gap = ref.largest_gap
    if gap is not None and (len(largest) == 1 or largest[1] < largest[0] - 4):
        row = found.largest.row(0, named=True)
        assert (row["before"], row["after"]) == (gap.before, gap.after)
        if gap.host_wait_ns is None:
            assert row["host_wait_ns"] is None
        else:
            assert abs(row["host_wait_ns"] - gap.host_wait_ns) <= 2


def _rewrite(source: Path, target: Path, layout: str) -> Path:
    """The same trace in another writer's layout (json module: the events and fields unchanged)."""
    document = json.loads(gzip.decompress(source.read_bytes()))
    events = document.pop("traceEvents")
    if layout == "compact":
        text = json.dumps({**document, "traceEvents": events}, separators=(",", ":"))
    elif layout == "indented":
        text = json.dumps({**document, "traceEvents": events}, indent=4)
    elif layout == "lists_after_events":  # Kineto's own INFO/ERROR log arrays, whose strings hold `]`
        text = json.dumps({**document, "traceEvents": events, "deviceProperties": document.get("deviceProperties"),
                           "INFO": ["INFO: a ] b", "x], [y"], "ERROR": ["]"]}, indent=1)
    elif layout == "events_first":
        text = json.dumps({"traceEvents": events, **document})
    elif layout == "bare_array":
        text = json.dumps(events, indent=2)
    elif layout == "bare_array_unclosed":  # the Chrome format allows leaving the array open
        text = json.dumps(events, indent=2).rstrip().rstrip("]").rstrip() + ",\n"
    elif layout == "bom_crlf":
        text = "\ufeff" + json.dumps({**document, "traceEvents": events}, indent=2).replace("\n", "\r\n")
    else:
        raise ValueError(layout)
    target.write_bytes(text.encode("utf-8"))
    return target


LAYOUTS = ["compact", "indented", "lists_after_events", "events_first", "bare_array", "bare_array_unclosed",
           "bom_crlf"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.slow
def test_every_layout_reads_the_same(layout, tmp_path, qwen_gpu_trace):
    original = load_kineto(qwen_gpu_trace)
    # Small chunks: many split points, each proven by decoding (chunks.py).
    rewritten = load_kineto(_rewrite(qwen_gpu_trace, tmp_path / "t.json", layout), chunk_bytes=1 << 18)
    assert rewritten.kernels.equals(original.kernels)
    assert rewritten.launches.equals(original.launches)
    # Shapes and dtypes are kept as the JSON text the writer wrote: compare what it says, not its spacing.
    raw = ["input_dims", "input_types", "concrete_inputs"]
    assert rewritten.ops.drop(raw).equals(original.ops.drop(raw))
    for column in raw:
        assert [json.loads(v) if v else v for v in rewritten.ops[column]] == \
            [json.loads(v) if v else v for v in original.ops[column]]


@pytest.mark.slow
def test_separators_inside_strings_never_split_an_event(tmp_path, qwen_gpu_trace):
    """Names holding `}, {`, `},{`, `]` and "traceEvents": a cut there would leave a string open, so the reader
    must fall back to whole-array decoding and still read every event exactly."""
    document = json.loads(gzip.decompress(qwen_gpu_trace.read_bytes()))
    hostile = ['a"}, {"ph": "X', 'b},{c', "d]}]", '"traceEvents": [', "e}\n  ,\n  {f"]
    for i, event in enumerate(document["traceEvents"]):
        if event.get("cat") == "kernel":
            event["name"] = hostile[i % len(hostile)] + event["name"]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document, indent=2))
    kernels = load_kineto(path, chunk_bytes=1 << 16).kernels
    expected = reference(path)
    assert kernels.height == expected.launches
    assert {n: (c, t) for n, c, t in kernels.group_by("name").agg(pl.len(), pl.col("dur_ns").sum()).iter_rows()} \
        == expected.by_name


def test_ranks_imported_together_equal_each_rank_alone():
    alone = [attribute(read_trace(path)) for path in RANKS]
    kernels, ops = combine_ranks(alone)
    for rank, (single, _) in enumerate(alone):
        part = kernels.filter(pl.col("rank") == rank)
        assert part.height == single.height
        assert _device_totals(part) == _device_totals(single)
    assert kernels["kernel_id"].n_unique() == kernels.height
    assert ops["op_id"].n_unique() == ops.height  # no id is shared by two ranks
    for rank, path in enumerate(RANKS):
        assert _device_totals(kernels.filter(pl.col("rank") == rank)) == reference(path).by_name


def test_ranks_keep_their_own_costs():
    from kernelscope.analyze.costs.kernel_costs import kernel_costs

    alone = [attribute(read_trace(path)) for path in RANKS]
    kernels, ops = combine_ranks(alone)
    together = kernel_costs(kernels, ops)
    for rank, (single_kernels, single_ops) in enumerate(alone):
        single = kernel_costs(single_kernels, single_ops)
        part = together.filter(pl.col("rank") == rank)
        assert part.height == single.height  # no row joined twice
        assert part["flops"].fill_null(0).sum() == pytest.approx(single["flops"].fill_null(0).sum(), rel=1e-12)


@pytest.mark.slow
def test_old_torch_traces_tie_kernels_to_their_operators():
    """torch 1.8: tids as strings, capitalised categories, `external id`; every kernel's external id names the
    operator open at its launch, and attribution must find that same operator."""
    path = PUBLIC / "kineto" / "resnet50_num_workers_0__worker0.pt.trace.json.gz"
    events = read_events(path)
    operators = {e["args"]["External id"]: e["name"] for e in events
                 if e.get("cat") == "Operator" and "External id" in e.get("args", {})}
    kernels, ops = attribute(read_trace(path))
    linked = kernels.filter(pl.col("external_id").is_in(list(operators)) & (pl.col("external_id") > 0))
    assert linked.height > 0.8 * kernels.filter(pl.col("kind") == "kernel").height
    ours = linked.join(ops.select(pl.col("op_id"), pl.col("external_id").alias("op_external_id")), on="op_id",
                       how="left")
    agree = (ours["op_external_id"] == ours["external_id"]).mean()
    assert agree >= 0.99


def test_traces_without_device_activity_are_cpu_runs():
    for name in ("data__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                 "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"):
        tables = read_trace(PUBLIC / "hta" / name)
        kernels, ops = attribute(tables)
        summary = summarize(Run(info=RunInfo(source="import", schema_version=1), kernels=kernels, ops=ops))
        assert summary.kind == "cpu" and summary.device_time_us == 0.0 and summary.cpu_time_us > 0
    profiler = read_trace(PUBLIC / "hta" / "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz")
    ranges = sum(e.get("cat") == "cuda_profiler_range" for e in read_events(
        PUBLIC / "hta" / "data__cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz"))
    assert profiler.meta.unread_device_activity == {"cuda_profiler_range": ranges}


@pytest.mark.slow
def test_mtia_device_activity_is_read():
    path = PUBLIC / "hta" / "data__mtia_inference_trace__mtia_inference_rank_0.json.gz"
    kernels, _ = attribute(read_trace(path))
    ccp = [e for e in read_events(path) if e.get("cat") == "mtia_ccp_events" and e.get("ph") == "X"]
    assert kernels.filter(pl.col("kind") == "kernel").height == len(ccp) > 0


CPU_RANK = PUBLIC / "hta" / "data__rank_non_gpu__rank_non_gpu.json.gz"


def _cpu_op_intervals_us(path: Path) -> list[tuple[float, float]]:
    """Each CPU op's whole call, [ts, ts + dur] in µs, as the file holds it (plain json)."""
    document = json.loads(gzip.decompress(path.read_bytes()))
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in document["traceEvents"]
                  if str(e.get("cat", "")).lower() in ("cpu_op", "operator") and e.get("ph") == "X")


def test_cpu_busy_of_a_cpu_only_rank_is_the_time_its_ops_ran():
    """A real CPU-only rank (2,424 nested ops on one thread): busy is the union of the ops' whole calls and the
    span runs to the last call's end, computed from the file in plain Python. A row's dur_ns is its op's self time,
    which a parent spends around its children: intervals of start plus self time covered 26.1 of 28.2 ms."""
    from kernelscope.analyze.structure.phases import phase_table

    intervals = _cpu_op_intervals_us(CPU_RANK)
    busy_us, stretch = 0.0, None
    for start, end in intervals:
        if stretch is None or start > stretch[1]:
            busy_us += stretch[1] - stretch[0] if stretch else 0.0
            stretch = [start, end]
        else:
            stretch[1] = max(stretch[1], end)
    busy_us += stretch[1] - stretch[0]
    span_us = max(end for _, end in intervals) - intervals[0][0]
    kernels, _ = attribute(read_trace(CPU_RANK))
    assert (kernels["kind"] == "cpu_op").all() and kernels.height == len(intervals)
    row = phase_table(kernels).row(0, named=True)
    assert row["busy_ns"] == pytest.approx(busy_us * 1e3, abs=len(intervals))
    assert row["span_ns"] == pytest.approx(span_us * 1e3, abs=2)
    assert row["busy_ns"] < 0.99 * row["span_ns"] and row["mean_gap_ns"] > 0
    # Without the whole calls (runs imported before op_dur_ns) the span would end too early: busy is not told.
    older = phase_table(kernels.drop("op_dur_ns")).row(0, named=True)
    assert older["busy_ns"] is None and older["busy_pct"] is None and older["device_time_ns"] == row["device_time_ns"]


def test_the_layer_breakdown_is_the_same_whatever_the_row_order(tmp_path):
    """A CPU-only rank whose ops start together with the ops they call (`aten::to` and `aten::_to_copy`): the
    breakdown's rows come in execution order with such ties broken by name, the same table from the rows in any
    order (the group-by's order had decided, so two runs wrote two files)."""
    from kernelscope.analyze.structure.layers import layer_breakdown
    from kernelscope.analyze.structure.phases import step_counts
    from kernelscope.cli import main
    from kernelscope.load import rundir

    assert main(["-q", "import", str(CPU_RANK), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    run = rundir.read_run(tmp_path / "run", ops=False)
    kernels = run.kernels
    steps = step_counts(kernels)
    tables = [layer_breakdown(rows, run.info.layer_types, steps)
              for rows in (kernels, kernels.reverse(), kernels.sample(fraction=1.0, shuffle=True, seed=3))]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    # Rows of one module that started together are in name order (plain Python over the table's own keys).
    first = {}
    for phase, module, name, start in kernels.select("phase", "module", "name", "start_ns").iter_rows():
        key = (phase, module or "", name)
        first[key] = min(first.get(key, start), start)
    together = 0
    rows = tables[0].select("phase", "layer_module", "name").iter_rows()
    previous = None
    for phase, module, name in rows:
        key = (phase, "" if module == "(no module)" else module, name)
        if previous and previous[:2] == key[:2] and first.get(previous) == first.get(key):
            together += 1
            assert previous[2] < key[2], (previous, key)
        previous = key
    assert together
