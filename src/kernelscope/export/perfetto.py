"""A run as a Chrome / Perfetto trace (the shape Kineto writes): kernels, memory copies and sets on (device, stream)
lanes, the runtime calls that launched them, CPU ops and annotation ranges, flow arrows from launch to kernel,
and kernelscope's attribution in every kernel's args (`ks.phase`, `ks.module`, …; docs/export.md). Each event's
JSON text is built by Polars expressions, column by column, not by a Python object per event."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import IO, Any

import msgspec
import numpy as np
import polars as pl

from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.contracts.run import Run
from kernelscope.contracts.trace_records import TraceInfo
from kernelscope.export.lanes import LANE_STRIDE, lanes

# Kineto's event categories for kernels.parquet's kinds.
TRACE_CATEGORIES = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
GPU_KINDS = tuple(TRACE_CATEGORIES)
CPU_OP_KIND = "cpu_op"

_ROWS_PER_WRITE = 100_000


def write_trace(run: Run, out: IO[str], trace_name: str = "kernelscope") -> None:
    """The run as a Kineto-shaped Chrome trace. Keys whose values hold brackets go before traceEvents, plain
    values after it, as Kineto lays them out (readers that locate the event array by text rely on it)."""
    trace = run.info.trace or TraceInfo()
    files = trace.files if isinstance(trace.files, list) else []
    first = files[0] if files else None
    properties = trace.device_properties if isinstance(trace.device_properties, list) else []
    head: dict[str, Any] = {
        "schemaVersion": trace.schema_version or (first.schema_version if first else None) or 1,
        "deviceProperties": properties or (first.device_properties if first else []),
    }
    for key in ("cupti_version", "cuda_runtime_version", "cuda_driver_version"):
        value = getattr(trace, key)
        if value is None and first is not None:
            value = getattr(first, key)
        if value is not None:
            head[key] = value
    head["kernelscope"] = {"exported_from": trace_name, "source": run.info.source}
    out.write(json.dumps(head)[:-1] + ',\n"traceEvents": [\n')
    wrote = False
    for chunk in trace_event_chunks(run):
        if chunk.len() == 0:
            continue
        out.write((",\n" if wrote else "") + chunk.str.join(",\n").item())
        wrote = True
    tail: dict[str, Any] = {"displayTimeUnit": "ns", "traceName": trace_name}
    base = trace.base_time_ns if trace.base_time_ns is not None or first is None else first.base_time_ns
    if base is not None:
        tail["baseTimeNanoseconds"] = base
    out.write("\n],\n" + json.dumps(tail)[1:] + "\n")


def trace_event_chunks(run: Run) -> Iterator[pl.Series]:
    """The trace's events as JSON text, one string per event, in bounded chunks. Rows without a start time
    (summary rows of an nsys statistics import) have no place on a timeline and are left out."""
    kernels, ops = run.kernels, run.ops
    if kernels["library"].is_null().any():
        kernels = with_kernel_catalog(kernels)
    origins = _origins_ns(run.info.trace or TraceInfo())
    kernels = _with_origin(kernels, origins)
    ops = _with_origin(ops, origins)
    gpu = kernels.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("start_ns").is_not_null())
    ops = ops.filter(pl.col("start_ns").is_not_null())
    gpu = _with_device_lanes(gpu)
    launched = gpu.filter(pl.col("launch_api").is_not_null() & pl.col("launch_start_ns").is_not_null())
    launches = launched.unique(["correlation", "pid", "tid", "launch_start_ns", "launch_api"], keep="first",
                               maintain_order=True)
    launches, ops = _with_cpu_lanes(launches, ops)
    yield _metadata_events(gpu, launches, ops)
    yield from _chunks(gpu, _kernel_events)
    yield from _chunks(launches, _runtime_events)
    yield from _chunks(launches.filter(pl.col("correlation").is_not_null()), _flow_starts)
    yield from _chunks(launched.filter(pl.col("correlation").is_not_null()), _flow_ends)
    cpu_only = gpu.height == 0
    if cpu_only:
        yield from _chunks(_ops_with_attribution(ops, kernels), functools.partial(_op_events, attributed=True))
    else:
        yield from _chunks(ops, _op_events)


def _with_device_lanes(gpu: pl.DataFrame) -> pl.DataFrame:
    """The exported tid of each device event (`_tid`): its stream, or an extra lane of it where it overlaps an
    earlier event of the stream (export/lanes.py), with the lane (`_lane`)."""
    device, stream = pl.col("device").fill_null(0), pl.col("stream").fill_null(0)
    track = gpu.select(pl.struct(device, stream).rank("dense").cast(pl.Int64)).to_series().to_numpy()
    start = gpu.select(pl.col("start_ns") + pl.col("_origin_ns")).to_series().to_numpy()
    end = start + gpu["dur_ns"].fill_null(0).to_numpy()
    lane = lanes(track, start, end, nested=False) if gpu.height else np.zeros(0, dtype=np.int64)
    return gpu.with_columns(pl.Series("_lane", lane, dtype=pl.Int64)).with_columns(
        (stream + pl.col("_lane") * LANE_STRIDE).alias("_tid"))


def _with_cpu_lanes(launches: pl.DataFrame, ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The exported tid (`_tid`) of the runtime calls and the ops of each thread: its thread, or an extra lane where a
    slice would cross one open on the thread (export/lanes.py)."""
    calls = launches.select(pl.col("pid").fill_null(0), pl.col("tid").fill_null(0),
                            (pl.col("launch_start_ns") + pl.col("_origin_ns")).alias("start"),
                            pl.col("launch_dur_ns").fill_null(0).alias("dur"))
    cpu = ops.select(pl.col("pid").fill_null(0), pl.col("tid").fill_null(0),
                     (pl.col("start_ns") + pl.col("_origin_ns")).alias("start"), pl.col("dur_ns").fill_null(0).alias("dur"))
    both = pl.concat([calls, cpu])
    track = both.select(pl.struct("pid", "tid").rank("dense").cast(pl.Int64)).to_series().to_numpy()
    start = both["start"].to_numpy()
    lane = lanes(track, start, start + both["dur"].to_numpy(), nested=True) if both.height else np.zeros(0, np.int64)
    tid = pl.col("tid").fill_null(0) + pl.col("_lane") * LANE_STRIDE
    return (launches.with_columns(pl.Series("_lane", lane[:calls.height], dtype=pl.Int64)).with_columns(tid.alias("_tid")),
            ops.with_columns(pl.Series("_lane", lane[calls.height:], dtype=pl.Int64)).with_columns(tid.alias("_tid")))


def _chunks(table: pl.DataFrame, events: Callable[[pl.DataFrame], pl.Series]) -> Iterator[pl.Series]:
    for offset in range(0, table.height, _ROWS_PER_WRITE):
        yield events(table.slice(offset, _ROWS_PER_WRITE))


def _origins_ns(trace: TraceInfo) -> dict[int | None, int]:
    """The trace timestamp (ns) that each rank's `*_ns` columns count from: run.json trace.origin_us, or per
    input file for imports; 0 where unknown."""
    origins: dict[int | None, int] = {}
    for rank, meta in enumerate(trace.files if isinstance(trace.files, list) else []):
        if meta.origin_us is not None:
            origins[rank] = round(meta.origin_us * 1000)
    origins[None] = round(trace.origin_us * 1000) if trace.origin_us is not None else origins.get(0, 0)
    return origins


def _with_origin(table: pl.DataFrame, origins: dict[int | None, int]) -> pl.DataFrame:
    if any(k is not None for k in origins):
        by_rank = {k: v for k, v in origins.items() if k is not None}
        origin = pl.col("rank").replace_strict(by_rank, default=origins[None], return_dtype=pl.Int64)
    else:
        origin = pl.lit(origins[None], dtype=pl.Int64)
    return table.with_columns(origin.alias("_origin_ns"))


# ---- JSON text from columns


def _us(ns: pl.Expr) -> pl.Expr:
    """Microseconds as exact decimal text with three decimals (ns precision), as Kineto writes times."""
    magnitude = ns.abs()
    return pl.concat_str(
        pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit("")),
        (magnitude // 1000).cast(pl.String),
        pl.lit("."),
        (magnitude % 1000).cast(pl.String).str.zfill(3),
    )


def _time(column: str) -> pl.Expr:
    """A `*_ns` column as a trace timestamp: the run's trace origin plus the column."""
    return _us(pl.col(column) + pl.col("_origin_ns"))


def _text(expr: pl.Expr) -> pl.Expr:
    """A JSON string literal (escaped by Polars' JSON encoder); null stays null."""
    encoded = pl.struct(expr.cast(pl.String).alias("s")).struct.json_encode()
    return pl.when(expr.is_not_null()).then(encoded.str.slice(5).str.strip_suffix("}"))


def _int(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Int64).cast(pl.String)


def _float(expr: pl.Expr) -> pl.Expr:
    value = expr.cast(pl.Float64)
    return pl.when(value.is_finite()).then(value.cast(pl.String))


def _triple(x: pl.Expr, y: pl.Expr, z: pl.Expr) -> pl.Expr:
    """[x, y, z] when all three are known."""
    return pl.concat_str(pl.lit("["), _int(x), pl.lit(","), _int(y), pl.lit(","), _int(z), pl.lit("]"))


def _object(fields: list[tuple[str, pl.Expr]]) -> pl.Expr:
    """A JSON object of the fields whose value (JSON text) is not null."""
    parts = [pl.when(value.is_not_null()).then(pl.lit(json.dumps(key) + ":") + value) for key, value in fields]
    return pl.concat_str(pl.lit("{"), pl.concat_str(parts, separator=",", ignore_nulls=True), pl.lit("}"))


def _literal(value: str) -> pl.Expr:
    return pl.lit(json.dumps(value))


def _events(table: pl.DataFrame, fields: list[tuple[str, pl.Expr]]) -> pl.Series:
    return table.select(_object(fields).alias("event")).to_series()


def _raw_json(table: pl.DataFrame, name: str) -> pl.Expr:
    """A column of JSON text (shapes, dtypes) embedded as is; values that are not valid JSON are left out."""
    invalid = []
    for text in table[name].drop_nulls().unique():
        try:
            msgspec.json.decode(text)
        except msgspec.DecodeError:
            invalid.append(text)
    return pl.when(~pl.col(name).is_in(invalid)).then(pl.col(name)) if invalid else pl.col(name)


_ATTRIBUTION = [  # kernels.parquet column → (ks.* arg, JSON kind)
    ("phase", "text"), ("step", "int"), ("layer", "int"), ("module", "text"), ("op", "text"),
    ("top_op", "text"), ("library", "text"), ("category", "text"), ("friendly_name", "text"), ("kernel_id", "int"),
]


def _attribution(instances: bool) -> list[tuple[str, pl.Expr]]:
    """kernelscope's attribution of a kernels.parquet row, as ks.* args; with `instances`, the launches a row
    stands for where that is not one."""
    fields = [(f"ks.{c}", _text(pl.col(c)) if kind == "text" else _int(pl.col(c))) for c, kind in _ATTRIBUTION]
    if instances:
        fields.append(("ks.instances", _int(pl.when(pl.col("instances") != 1).then(pl.col("instances")))))
    return fields


# ---- event kinds


def _kernel_events(gpu: pl.DataFrame) -> pl.Series:
    category = pl.col("kind").replace_strict(TRACE_CATEGORIES, return_dtype=pl.String)
    args = [
        ("device", _int(pl.col("device"))),
        ("stream", _int(pl.col("stream"))),
        ("correlation", _int(pl.col("correlation"))),
        ("External id", _int(pl.col("external_id"))),
        ("grid", _triple(pl.col("grid_x"), pl.col("grid_y"), pl.col("grid_z"))),
        ("block", _triple(pl.col("block_x"), pl.col("block_y"), pl.col("block_z"))),
        ("registers per thread", _int(pl.col("registers_per_thread"))),
        ("shared memory", _int(pl.col("shared_memory_bytes"))),
        ("est. achieved occupancy %", _float(pl.col("est_occupancy_pct"))),
        ("bytes", _int(pl.col("bytes"))),
        *_attribution(instances=True),
    ]
    return _events(gpu, [
        ("ph", _literal("X")),
        ("cat", _text(category)),
        ("name", _text(pl.col("name"))),
        ("pid", _int(pl.col("device").fill_null(0))),
        ("tid", _int(pl.col("_tid"))),
        ("ts", _time("start_ns")),
        ("dur", _us(pl.col("dur_ns"))),
        ("args", _object(args)),
    ])


def _runtime_events(launches: pl.DataFrame) -> pl.Series:
    return _events(launches, [
        ("ph", _literal("X")),
        ("cat", _literal("cuda_runtime")),
        ("name", _text(pl.col("launch_api"))),
        ("pid", _int(pl.col("pid").fill_null(0))),
        ("tid", _int(pl.col("_tid"))),
        ("ts", _time("launch_start_ns")),
        ("dur", _us(pl.col("launch_dur_ns").fill_null(0))),
        ("args", _object([("External id", _int(pl.col("external_id"))),
                          ("correlation", _int(pl.col("correlation")))])),
    ])


def _flow_id(table: pl.DataFrame) -> pl.Expr:
    """The correlation id, made unique per rank (imports of several files)."""
    return _int(pl.col("correlation") + pl.col("rank").fill_null(0) * (1 << 40))


def _flow_starts(launches: pl.DataFrame) -> pl.Series:
    """Flow arrows leave the launching runtime call (bound to the slice around ts on that thread)."""
    return _events(launches, [
        ("ph", _literal("s")),
        ("id", _flow_id(launches)),
        ("pid", _int(pl.col("pid").fill_null(0))),
        ("tid", _int(pl.col("_tid"))),
        ("ts", _time("launch_start_ns")),
        ("cat", _literal("ac2g")),
        ("name", _literal("ac2g")),
    ])


def _flow_ends(launched: pl.DataFrame) -> pl.Series:
    """…and end on the kernel ("bp": "e": bound to the enclosing slice, the kernel starting at ts)."""
    return _events(launched, [
        ("ph", _literal("f")),
        ("id", _flow_id(launched)),
        ("pid", _int(pl.col("device").fill_null(0))),
        ("tid", _int(pl.col("_tid"))),
        ("ts", _time("start_ns")),
        ("cat", _literal("ac2g")),
        ("name", _literal("ac2g")),
        ("bp", _literal("e")),
    ])


def _ops_with_attribution(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """CPU-only runs: each CPU op row of kernels.parquet (its self time) joined back to its op, so the op's
    event carries the attribution."""
    keys = ["pid", "tid", "start_ns", "name"]
    columns = [c for c, _ in _ATTRIBUTION]
    rows = kernels.filter(pl.col("kind") == CPU_OP_KIND).select(*keys, *columns).unique(keys, keep="first")
    cpu = ops.filter(pl.col("cat") == "cpu_op").join(rows, on=keys, how="left", maintain_order="left")
    return pl.concat([cpu, ops.filter(pl.col("cat") != "cpu_op")], how="diagonal_relaxed").sort(
        "start_ns", maintain_order=True
    )


def _op_events(ops: pl.DataFrame, attributed: bool = False) -> pl.Series:
    cpu_op = pl.col("cat") == "cpu_op"
    args = [
        ("External id", _int(pl.col("external_id"))),
        ("Sequence number", _int(pl.col("sequence_number"))),
        ("Input Dims", _raw_json(ops, "input_dims")),
        ("Input type", _raw_json(ops, "input_types")),
        ("Concrete Inputs", _raw_json(ops, "concrete_inputs")),
    ]
    if attributed:  # CPU-only runs: the op's attribution
        args += _attribution(instances=False)
    return _events(ops, [
        ("ph", _literal("X")),
        ("cat", pl.when(cpu_op).then(_literal("cpu_op")).otherwise(_literal("user_annotation"))),
        ("name", _text(pl.col("name"))),
        ("pid", _int(pl.col("pid").fill_null(0))),
        ("tid", _int(pl.col("_tid"))),
        ("ts", _time("start_ns")),
        ("dur", _us(pl.col("dur_ns").fill_null(0))),
        ("args", _object(args)),
    ])


def _metadata_events(gpu: pl.DataFrame, launches: pl.DataFrame, ops: pl.DataFrame) -> pl.Series:
    """Names for the lanes: GPU processes and their streams, CPU processes and threads."""
    devices = gpu.select(pl.col("device").fill_null(0)).unique().sort("device")
    streams = (gpu.select(pl.col("device").fill_null(0), pl.col("stream").fill_null(0), "_tid", "_lane").unique()
               .sort("device", "stream", "_lane"))
    columns = [pl.col("pid").fill_null(0), pl.col("tid").fill_null(0), "_tid", "_lane"]
    threads = pl.concat([ops.select(columns), launches.select(columns)]).unique().sort("pid", "tid", "_lane")
    processes = threads.select("pid").unique().sort("pid")

    def named(table: pl.DataFrame, kind: str, pid: str, tid: str | None, label: pl.Expr) -> pl.Series:
        fields = [("name", _literal(kind)), ("ph", _literal("M")), ("pid", _int(pl.col(pid)))]
        if tid is not None:
            fields.append(("tid", _int(pl.col(tid))))
        fields.append(("args", _object([("name", _text(label))])))
        return _events(table, fields)

    return pl.concat([
        named(devices, "process_name", "device", None, pl.format("GPU {}", pl.col("device"))),
        named(streams, "thread_name", "device", "_tid", _lane_name("stream {}", "stream")),
        named(processes, "process_name", "pid", None, pl.format("CPU process {}", pl.col("pid"))),
        named(threads, "thread_name", "pid", "_tid", _lane_name("thread {}", "tid")),
    ])


def _lane_name(pattern: str, column: str) -> pl.Expr:
    """`stream 7`, and `stream 7 (overlap lane 1)` for the extra lanes of slices that would overlap on it."""
    name = pl.format(pattern, pl.col(column))
    return pl.when(pl.col("_lane") > 0).then(pl.format("{} (overlap lane {})", name, pl.col("_lane"))).otherwise(name)
