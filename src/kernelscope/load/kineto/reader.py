"""load_kineto: one Kineto trace file → TraceTables (contracts.trace)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kernelscope.contracts.tables import TRACE_KERNEL_COLUMNS, TRACE_LAUNCH_COLUMNS, TRACE_OP_COLUMNS
from kernelscope.contracts.trace import FileMarks, TraceMeta, TraceTables
from kernelscope.errors import UserError
from kernelscope.load.kineto.chunks import (
    CHUNK_BYTES,
    PARALLEL_BYTES,
    Progress,
    chunk_ranges,
    decode_chunks,
    release,
)
from kernelscope.load.kineto.document import EventArray, locate_events, open_trace_text
from kernelscope.load.kineto.events import ChunkError, decode_chunk
from kernelscope.load.kineto.marks import WINDOW_END, WINDOW_START, ChunkMarks
from kernelscope.load.kineto.native_tables import available as native_available
from kernelscope.load.names import bounded
from kernelscope.workers import usable_cores

_COLUMNS = {"kernels": TRACE_KERNEL_COLUMNS, "launches": TRACE_LAUNCH_COLUMNS, "ops": TRACE_OP_COLUMNS}


def load_kineto(path: Path, workers: int | None = None, chunk_bytes: int | None = None,
                progress: Progress | None = None) -> TraceTables:
    """Read one Kineto trace. The event array is decoded in chunks (bounded memory); with workers > 1 (default:
    default_workers) threads (native fast path) or helper processes (msgspec alone) share the chunks.
    A chunk that does not decode means the text search misplaced the array or a split point: the exactly
    located array is then decoded in one piece (and errors name the file)."""
    decode = functools.partial(decode_chunk, str(path))
    chunk_bytes = chunk_bytes or default_chunk_bytes()
    with open_trace_text(path) as (plain, data):
        array = locate_events(path, data)
        if workers is None:
            workers = default_workers(array.length, chunk_bytes)
        try:
            parts = _decode(decode, plain, data, array, workers, chunk_bytes, progress=progress)
        except ChunkError:
            exact = array if array.exact else locate_events(path, data, exact=True)
            parts = _decode(decode, plain, data, exact, 1, chunk_bytes=exact.length + 1, final=True)
            array = exact
        # An array without its closing bracket: what follows its last complete event was not read.
        # (separators and white space between the last event and the cut piece are not counted)
        trailing = len(data[array.offset + array.length:].strip().lstrip(b",").strip()) if array.unclosed else 0
    tables = _assemble(parts, _metadata(array.fields))
    tables.meta.marks = file_marks([p.get("marks") for p in parts], array.unclosed, trailing)
    if tables.kernels.height == 0 and not (tables.ops["cat"] == "cpu_op").any():
        raise UserError(f"{path}: {_nothing_to_read(tables)}")
    return tables


def file_marks(chunks: list[ChunkMarks | None], unclosed: bool, trailing: int) -> FileMarks:
    """The file's flows (how many, how many ids lack their other end), window and end, from its chunks' marks."""
    flows = [flow for chunk in chunks if chunk is not None for flow in chunk.flows]
    starts = {(cat, flow_id) for cat, flow_id, ph in flows if ph == "s"}
    ends = {(cat, flow_id) for cat, flow_id, ph in flows if ph == "f"}
    instants = [instant for chunk in chunks if chunk is not None for instant in chunk.instants]
    begins = [ts for name, ts in instants if name.startswith(WINDOW_START)]
    closes = [ts for name, ts in instants if name == WINDOW_END]
    window = (min(begins), max(closes)) if begins and closes and min(begins) <= max(closes) else None
    return FileMarks(flows=len(flows), flows_unpaired=len(starts ^ ends), window_us=window, unclosed=unclosed,
                     trailing_bytes=trailing)


def _nothing_to_read(tables: TraceTables) -> str:
    """Why a trace gives no kernels and no CPU ops: an empty event array, no event of a kind Kineto records work
    with (another program's Chrome trace, a legacy torch.autograd.profiler export), or only calls and ranges."""
    events = tables.meta.event_count
    if events == 0:
        return "no events in its `traceEvents`"
    read = tables.launches.height + tables.ops.height + sum(tables.meta.unread_device_activity.values())
    if read == 0:
        which = "its one event is not" if events == 1 else f"none of its {events:,} events is"
        return (f"{which} a kernel, copy, runtime call, CPU op or annotation as Kineto writes them (`cat`): an empty profile, or not a Kineto trace (a legacy torch.autograd.profiler export, a "
                "TensorFlow timeline, another program's Chrome trace)")
    held = {"runtime calls": tables.launches.height, "ranges or Python frames": tables.ops.height,
            "device ranges": sum(tables.meta.unread_device_activity.values())}
    return ("no kernels, memory copies or CPU ops in this trace (only "
            + ", ".join(f"{count:,} {what}" for what, count in held.items() if count) + ")")


NATIVE_CHUNK_BYTES = 8 << 20


def default_chunk_bytes() -> int:
    """How much of the event array one chunk holds. The native fast path's threads each keep simdjson's working
    buffers, about 4-5× their chunk: with 16 MB chunks, 8 threads held 1.0 GB at the peak of a 340 MB trace,
    with 8 MB chunks 0.64 GB (2 threads: 0.40 → 0.30 GB), at the same speed; 4 MB chunks were slower. The msgspec
    path keeps 16 MB (its helper processes pay per chunk)."""
    return NATIVE_CHUNK_BYTES if native_available() else CHUNK_BYTES


MAX_WORKERS = 8  # beyond this, starting helpers and collecting their tables costs more than it saves


def default_workers(length: int, chunk_bytes: int) -> int:
    """Decoders for one array of `length` bytes. With the native fast path they are threads, which cost nothing
    to start: one per usable core, at most MAX_WORKERS and at most one per chunk. Without it they are processes:
    one for arrays up to PARALLEL_BYTES, else one per usable core, at most MAX_WORKERS and at most one per two
    chunks (a helper that starts late finds nothing left to take)."""
    if native_available():
        return max(1, min(usable_cores(), MAX_WORKERS, -(-length // chunk_bytes)))
    if length <= PARALLEL_BYTES:
        return 1
    return max(1, min(usable_cores(), MAX_WORKERS, length // (2 * chunk_bytes)))


def _decode(decode, plain: Path, data, array: EventArray, workers: int, chunk_bytes: int,
            final: bool = False, progress: Progress | None = None) -> list[dict]:
    chunks = chunk_ranges(data, array.offset, array.length, chunk_bytes, closed=not array.unclosed)
    release(data)  # finding the split points read the whole file; decoding reads it again chunk by chunk
    return decode_chunks(decode, plain, data, chunks, workers, final=final, progress=progress)


def _metadata(fields: dict[str, Any]) -> TraceMeta:
    properties = fields.get("deviceProperties")
    return TraceMeta(
        source_format="kineto",
        schema_version=fields.get("schemaVersion"),
        device_properties=[usable_properties(p) for p in properties if isinstance(p, dict)]
        if isinstance(properties, list) else [],
        base_time_ns=fields.get("baseTimeNanoseconds"),
        cuda_runtime_version=fields.get("cuda_runtime_version"),
        cuda_driver_version=fields.get("cuda_driver_version"),
        cupti_version=fields.get("cupti_version"),
        trace_id=fields.get("trace_id"),
        distributed_info=fields.get("distributedInfo"),
    )


# What kernelscope reads of a device's properties, and the type each must have to be believed.
_PROPERTY_TEXT = ("name",)
_PROPERTY_COUNTS = ("id", "totalGlobalMem", "computeMajor", "computeMinor", "numSms", "l2CacheSize",
                    "maxThreadsPerBlock", "maxThreadsPerMultiprocessor", "regsPerBlock", "warpSize",
                    "sharedMemPerBlock", "regsPerMultiprocessor", "sharedMemPerBlockOptin",
                    "sharedMemPerMultiprocessor")


def usable_properties(props: dict[str, Any]) -> dict[str, Any]:
    """A device's properties with every value kernelscope reads of the right kind (a name that is text, counts
    that are non-negative integers within int64); others are left out, as if the trace had not written them."""
    kept = {}
    for key, value in props.items():
        if key in _PROPERTY_TEXT:
            if isinstance(value, str) and value.strip():
                kept[key] = bounded(value)
        elif key in _PROPERTY_COUNTS:
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
                kept[key] = value
        else:
            kept[key] = value
    return kept


def _assemble(parts: list[dict[str, Any]], meta: TraceMeta) -> TraceTables:
    """Concatenate chunk tables and turn absolute µs starts into int64 ns from the trace's origin."""
    # One chunk per column: later eager operations would otherwise copy the whole table into one, each time.
    # Table by table, the chunks' copies let go as soon as concatenated: at most one table is held twice.
    tables = {}
    for name in _COLUMNS:
        tables[name] = pl.concat([p[name] for p in parts], how="vertical_relaxed", rechunk=True)
        for part in parts:
            part[name] = None
    firsts = [t["ts_us"].min() for t in tables.values() if t.height]
    origin_us = float(min(firsts)) if firsts else 0.0
    for name, table in tables.items():
        start = ((table["ts_us"].to_numpy() - origin_us) * 1e3).round().astype(np.int64)
        tables[name] = table.with_columns(pl.Series("start_ns", start)).drop("ts_us").select(list(_COLUMNS[name]))
    # Kernels in time order now, while the table is narrow: attribution keeps this order (its own sort then
    # finds the column sorted and copies nothing), instead of sorting a table twice as wide at its peak.
    tables["kernels"] = tables["kernels"].sort("start_ns", maintain_order=True)
    unread: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for part in parts:
        for cat, count in part["unread"].items():
            unread[cat] = unread.get(cat, 0) + count
        for reason, count in part.get("dropped", {}).items():
            dropped[reason] = dropped.get(reason, 0) + count
    meta.event_count = sum(p["event_count"] for p in parts)
    meta.origin_us = origin_us
    meta.unread_device_activity = unread
    meta.dropped_events = dropped
    return TraceTables(kernels=tables["kernels"], launches=tables["launches"], ops=tables["ops"], meta=meta)
