"""Nsight Systems exports as people record them: the per-op NVTX ranges of `emit_nvtx` (ops, not modules), vLLM's
and SGLang's layer-by-layer NVTX markers (modules), several processes in one export (ranks, their collectives
matched), the GPU of 2020–2021 exports (TARGET_INFO_CUDA_GPU), and a public 2021 export kept byte for byte.
Exports are written from real Kineto traces by tests/nsys_sqlite_writer.py; every expected value is read from the
export with plain sqlite3 SQL."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution_sources import attribution_info
from kernelscope.analyze.ranks.communication import communication
from kernelscope.cli import main
from kernelscope.commands.importers.rank_files import read_rank
from kernelscope.load.kineto import load_kineto
from tests.nsys_sqlite_writer import write_nsys_processes, write_nsys_sqlite

DATA = Path(__file__).resolve().parents[1] / "data"
QWEN = DATA / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
PID_BITS = 1 << 24


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def _innermost_at_launch(path: Path, keep) -> list[str | None]:
    """For each kernel in (start, correlation) order: the text of the innermost push/pop range with keep(text) open
    on its launching thread when its runtime call started (start <= call < end), in one sweep per thread (push/pop
    ranges nest); the call is the one with the kernel's correlation id in the kernel's process."""
    launches = _sql(path, "SELECT r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME "
                          "r ON r.correlationId = k.correlationId AND r.globalTid / 16777216 % 16777216 = "
                          "k.globalPid / 16777216 % 16777216 ORDER BY k.start, k.correlationId")
    ranges: dict[int, list[tuple[int, int, str]]] = {}
    for tid, start, end, text in _sql(path, 'SELECT globalTid, start, "end", text FROM NVTX_EVENTS WHERE eventType = 59 '
                                            'AND "end" IS NOT NULL'):
        if keep(text):
            ranges.setdefault(tid, []).append((start, end, text))
    found: dict[tuple[int, int], str | None] = {}
    for tid in {tid for tid, _ in launches}:
        spans = sorted(ranges.get(tid, []), key=lambda r: (r[0], -r[1]))
        stack: list[tuple[int, int, str]] = []
        i = 0
        for t in sorted({t for thread, t in launches if thread == tid}):
            while i < len(spans) and spans[i][0] <= t:
                while stack and stack[-1][1] <= spans[i][0]:
                    stack.pop()
                stack.append(spans[i])
                i += 1
            while stack and stack[-1][1] <= t:
                stack.pop()
            found[(tid, t)] = stack[-1][2] if stack else None
    return [found[launch] for launch in launches]


def _emit_nvtx(kineto) -> pl.DataFrame:
    """The trace's CPU ops as the ranges emit_nvtx pushes: `name, seq = N, op_id = M, sizes = […]` (its own
    annotations left out)."""
    ops = kineto.ops.filter(pl.col("cat") == "cpu_op").with_row_index("op_id", offset=1)
    text = pl.concat_str([
        pl.col("name"),
        pl.when(pl.col("sequence_number").is_not_null())
        .then(pl.format(", seq = {}", pl.col("sequence_number"))).otherwise(pl.lit("")),
        pl.format(", op_id = {}", pl.col("op_id")),
        pl.when(pl.col("input_dims").is_not_null())
        .then(pl.format(", sizes = {}", pl.col("input_dims").cast(pl.String))).otherwise(pl.lit("")),
    ])
    return ops.with_columns(text.alias("name"), pl.lit("annotation").alias("cat")).drop("op_id")


@pytest.fixture(scope="module")
def emit_nvtx_export(tmp_path_factory) -> Path:
    kineto = load_kineto(QWEN)
    ranges = _emit_nvtx(kineto)
    trace = type(kineto)(kernels=kineto.kernels, launches=kineto.launches, ops=ranges, meta=kineto.meta)
    return write_nsys_sqlite(trace, tmp_path_factory.mktemp("emit") / "emit_nvtx.sqlite")


@pytest.mark.slow
def test_emit_nvtx_ranges_are_ops_not_modules(emit_nvtx_export):
    rank = read_rank(str(emit_nvtx_export), workers=1)
    kernels = rank.kernels.filter(pl.col("kind") == "kernel").sort("start_ns", "kernel_id")
    expected = [text.split(",")[0] if text else None for text in _innermost_at_launch(emit_nvtx_export, bool)]
    assert kernels.height == len(expected)
    assert kernels["op"].to_list() == expected
    total = kernels["dur_ns"].sum()
    with_op = sum(d for d, op in zip(kernels["dur_ns"], expected, strict=True) if op)
    assert kernels.filter(pl.col("op").is_not_null())["dur_ns"].sum() == with_op and with_op / total > 0.95
    # No op range became a module: modules are the repeats' layers, not 4,970 one-launch "modules".
    info = attribution_info(rank.kernels, [rank.sources])
    assert info.module.source == "inferred from the trace's regularities"
    assert not set(kernels["module"].drop_nulls()) & set(kernels["op"].drop_nulls())
    assert kernels["layer"].drop_nulls().n_unique() == 24  # the model's layers, from the repeats
    # shapes and sequence numbers travel with the ops
    ops = rank.ops.filter(pl.col("cat") == "cpu_op")
    recorded = _sql(emit_nvtx_export, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE '%, seq = %'")[0][0]
    assert ops["sequence_number"].is_not_null().sum() == recorded
    assert ops.filter(pl.col("name") == "aten::mm")["input_dims"].is_not_null().all()


def _pyprof_markers(ranges: pl.DataFrame) -> pl.DataFrame:
    """The two ranges NVIDIA PyProf (`pyprof.nvtx.init()`, also under DLProf) pushes around each call of a torch
    function, here around every outermost op: the call's stack, then the function with its arguments' shapes."""
    ordered = ranges.sort("tid", "start_ns")
    outermost, reach = [], {}
    for tid, start, dur in ordered.select("tid", "start_ns", "dur_ns").iter_rows():
        outermost.append(start >= reach.get(tid, start))
        reach[tid] = max(reach.get(tid, start), start + dur)
    top = ordered.filter(pl.Series(outermost))
    stack = pl.lit("{'traceMarker': ['generate.py:41', 'modeling_qwen2.py:223'], 'funcStack': '/Qwen2Model::forward'}")
    call = pl.concat_str([pl.lit("{'mod': 'torch', 'op': '"), pl.col("name").str.extract(r"::(\w+)"),
                          pl.lit("', 'args': [{'name': '', 'type': 'tensor', 'shape': (1, 16, 896), 'dtype': 'bfloat16'}]}")])
    return pl.concat([top.with_columns(stack.alias("name")), top.with_columns(call.alias("name"))])


def test_pyprof_markers_are_neither_modules_nor_ops(tmp_path):
    """PyProf's and DLProf's markers (`{'traceMarker': [...]}`, `{'mod': 'torch', 'op': 'mm', 'args': [...]}`) wrap
    the emit_nvtx op ranges of every call: they name no module (the layers still come from the repeats) and leave
    each kernel's op to the emit_nvtx range open at its launch."""
    kineto = load_kineto(QWEN)
    ranges = _emit_nvtx(kineto)
    trace = type(kineto)(kernels=kineto.kernels, launches=kineto.launches,
                         ops=pl.concat([ranges, _pyprof_markers(ranges)]), meta=kineto.meta)
    path = write_nsys_sqlite(trace, tmp_path / "pyprof.sqlite")
    markers = _sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE '{''traceMarker'':%'")[0][0]
    assert markers > 100
    rank = read_rank(str(path), workers=1)
    kernels = rank.kernels.filter(pl.col("kind") == "kernel").sort("start_ns", "kernel_id")
    ops = _innermost_at_launch(path, lambda text: not text.startswith("{"))
    expected = [text.split(",")[0] if text else None for text in ops]
    assert kernels["op"].to_list() == expected and kernels["op"].is_not_null().mean() > 0.95
    info = attribution_info(rank.kernels, [rank.sources])
    assert info.module.source == "inferred from the trace's regularities"
    assert not kernels["module"].drop_nulls().str.contains("{", literal=True).any()
    assert kernels["layer"].drop_nulls().n_unique() == 24


def test_layerwise_markers_of_serving_engines_are_modules(tmp_path):
    """vLLM's `--enable-layerwise-nvtx-tracing` (and SGLang's marker) push `{'Module': 'top.<qualified name>', …}`:
    each kernel's module is the innermost marker's module, its layer the first number in it."""
    kineto = load_kineto(QWEN)
    ks = kineto.ops.filter((pl.col("cat") == "annotation") & pl.col("name").str.starts_with("ks.module:"))
    markers = ks.with_columns(pl.concat_str([pl.lit("{'Module': 'top."), pl.col("name").str.strip_prefix("ks.module:"),
                                             pl.lit("', 'TrainableParams': {'weight': [896, 896]}}")]).alias("name"))
    trace = type(kineto)(kernels=kineto.kernels, launches=kineto.launches, ops=markers, meta=kineto.meta)
    path = write_nsys_sqlite(trace, tmp_path / "layerwise.sqlite")
    rank = read_rank(str(path), workers=1)
    kernels = rank.kernels.filter(pl.col("kind") == "kernel").sort("start_ns", "kernel_id")
    expected = [text.split("'")[3].removeprefix("top.") if text else None for text in _innermost_at_launch(path, bool)]
    assert kernels["module"].to_list() == expected
    layers = [int(m.split(".")[2]) if m and m.startswith("model.layers.") else None for m in expected]
    assert kernels["layer"].to_list() == layers
    assert rank.sources.module == "layer-by-layer NVTX markers (vLLM, SGLang)"


def test_processes_of_one_export_are_ranks_with_matched_collectives(tmp_path):
    """Two expert-parallel ranks recorded in one nsys capture: each process is a rank, with its own launches, and
    every NCCL kernel is matched with the other rank's."""
    traces = [load_kineto(DATA / "multi_gpu" / f"deepseek_v3_ep2_rank{r}.json.gz") for r in (0, 1)]
    path = write_nsys_processes(traces, [4101, 4102], tmp_path / "two_processes.sqlite")
    per_pid = dict(_sql(path, "SELECT globalPid / 16777216 % 16777216, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                              "GROUP BY 1"))
    copies = dict(_sql(path, "SELECT globalPid / 16777216 % 16777216, count(*) FROM (SELECT globalPid FROM "
                             "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) "
                             "GROUP BY 1"))
    nccl = dict(_sql(path, "SELECT k.globalPid / 16777216 % 16777216, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel%' GROUP BY 1"))
    out = tmp_path / "run"
    assert main(["-q", "import", str(path), "--out", str(out), "--no-report"]) == 0
    kernels = pl.read_parquet(out / "kernels.parquet")
    counts = dict(kernels.group_by("rank").len().iter_rows())
    assert counts == {0: per_pid[4101] + copies.get(4101, 0), 1: per_pid[4102] + copies.get(4102, 0)}
    pids = kernels.filter(pl.col("pid").is_not_null()).group_by("rank").agg(pl.col("pid").unique()).sort("rank")
    assert pids["pid"].to_list() == [[4101], [4102]]
    matched = communication(kernels)
    assert matched is not None and matched.ranks == 2 and matched.unmatched == 0
    assert matched.instances.group_by("rank").len().sort("rank")["len"].to_list() == [nccl[4101], nccl[4102]]


def test_gpu_of_a_2020_era_export(tmp_path):
    """Exports of nsys 2020–2021 describe the GPU in TARGET_INFO_CUDA_GPU: its name, SMs and compute capability are
    read, so the roofline is drawn for it."""
    path = write_nsys_sqlite(load_kineto(QWEN), tmp_path / "2020.sqlite", "2020")
    name, sms, major, minor, mib = _sql(path, "SELECT name, numMultiprocessors, computeCapabilityMajor, "
                                              "computeCapabilityMinor, globalMemorySize FROM TARGET_INFO_CUDA_GPU")[0]
    out = tmp_path / "run"
    assert main(["-q", "import", str(path), "--out", str(out), "--lang", "en", "--figure-formats", "none"]) == 0
    hardware = json.loads((out / "run.json").read_text())["hardware"]
    assert (hardware["name"], hardware["sm_count"], hardware["compute_capability"]) == (name, sms, f"{major}.{minor}")
    assert hardware["memory_bytes"] == mib * 2**20
    assert "## Roofline" in (out / "report" / "report.md").read_text()


def test_public_2021_export_imports_exactly(tmp_path):
    """An export committed to a public repository in 2021 (no META_DATA_EXPORT, no NVTX, a Quadro RTX 6000): every
    kernel, copy and set, with the export's own durations, and the GPU named."""
    path = DATA / "nsys" / "public" / "mordred_2021_report1.sqlite"
    expected = {}
    for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        expected[kind] = _sql(path, f'SELECT count(*), sum("end" - start) FROM {table}')[0]
    gpu = _sql(path, "SELECT name FROM TARGET_INFO_GPU")[0][0]
    out = tmp_path / "run"
    assert main(["-q", "import", str(path), "--out", str(out), "--no-report"]) == 0
    kernels = pl.read_parquet(out / "kernels.parquet")
    ours = {kind: (n, total) for kind, n, total in
            kernels.group_by("kind").agg(pl.len(), pl.col("dur_ns").sum()).iter_rows()}
    assert ours == {kind: counts for kind, counts in expected.items() if counts[0]}
    assert json.loads((out / "run.json").read_text())["hardware"]["name"] == gpu
    # No ENUM tables: copies are named by nsys's numbering, as newer exports' ENUM_CUDA_MEMCPY_OPER and
    # ENUM_CUDA_MEM_KIND list it (1 HtoD, 2 DtoH; 0 Pageable, 2 Device).
    directions, kinds = {1: "HtoD", 2: "DtoH"}, {0: "Pageable", 1: "Pinned", 2: "Device"}
    copies = Counter(f"Memcpy {directions[c]} ({kinds[s]} -> {kinds[d]})" for c, s, d in
                     _sql(path, "SELECT copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    copies.update(f"Memset ({kinds[m]})" for (m,) in _sql(path, "SELECT memKind FROM CUPTI_ACTIVITY_KIND_MEMSET"))
    assert dict(kernels.filter(pl.col("kind") != "kernel").group_by("name").len().iter_rows()) == copies
