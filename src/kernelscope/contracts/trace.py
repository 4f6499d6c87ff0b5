"""What a loader gives for one recorded trace (Kineto JSON, Nsight Systems SQLite): three tables with the columns
of contracts.tables (TRACE_KERNEL_COLUMNS, TRACE_LAUNCH_COLUMNS, TRACE_OP_COLUMNS; times in int64 ns from the
trace's origin) and what the file says about itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl


class FileMarks(msgspec.Struct, kw_only=True):
    """What a file holds besides the events its tables read, that says whether those are whole (the integrity
    audit counts from it): its flow arrows, the profiler's window, whether its event array ends."""

    flows: int | None = None  # flow events (ph s, f, t); None: the format has none
    flows_unpaired: int | None = None  # flow ids (per category) with a start and no end, or an end and no start
    window_us: tuple[float, float] | None = None  # the recorded window as the file marks it (µs, the file's clock)
    unclosed: bool = False  # the event array has no closing bracket (the file may have been cut)
    trailing_bytes: int = 0  # bytes after the last complete event, not read


class TraceMeta(msgspec.Struct, kw_only=True):
    source_format: str = "kineto"  # kineto, nsys-sqlite
    event_count: int = 0
    origin_us: float = 0.0  # the trace's own timestamp (µs) that the tables' *_ns columns count from
    schema_version: Any = None
    device_properties: list[dict[str, Any]] = msgspec.field(default_factory=list)
    base_time_ns: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    trace_id: Any = None
    distributed_info: Any = None
    # Device activity the trace holds that no table reads (e.g. CUPTI range-profiler ranges): category → events.
    unread_device_activity: dict[str, int] = msgspec.field(default_factory=dict)
    # Events a reader left out or repaired because a field was unusable (reason → events): negative or absurd
    # durations and times, malformed args, launches sharing one correlation id, names cut to the length limit.
    dropped_events: dict[str, int] = msgspec.field(default_factory=dict)
    # Calls that start device work (kernel and graph launches, copies, sets) in a trace that records no device
    # activity at all: the profiler ran without recording the device (set when the file is read).
    unrecorded_device_calls: int = 0
    # Nsight Systems exports: the product version, the session's start (UTC ns), how per-process correlation
    # ids were made unique.
    marks: FileMarks = msgspec.field(default_factory=FileMarks)
    audit: Any = None  # the integrity audit of this file (contracts.trace_records.TraceAudit), once made
    nsys_version: str | None = None
    session_start_utc_ns: int | None = None
    correlation_encoding: str | None = None


@dataclass
class TraceTables:
    """kernels: device kernels, memory copies and sets (kind kernel / memcpy / memset); launches: the runtime
    or driver calls that launched them; ops: CPU ops (cat cpu_op), annotation ranges (annotation) and Python
    frames (python: with_stack traces, incl. `nn.Module: …` frames)."""

    kernels: pl.DataFrame
    launches: pl.DataFrame
    ops: pl.DataFrame
    meta: TraceMeta
