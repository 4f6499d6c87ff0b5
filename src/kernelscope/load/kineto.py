"""Read a Kineto (torch.profiler / Chrome trace) JSON file into columnar tables.

Decoding is typed (msgspec): only the fields kernelscope uses are materialised, everything else is
skipped by the decoder. Handles .json and .json.gz, the object form ({"traceEvents": [...]}) and the bare
array form, current lower-case categories and the older capitalised ones ("Kernel", "Runtime", "Operator").
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from kernelscope.errors import UserError


class _Args(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_lower: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    occupancy: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    blocks_per_sm: float | None = msgspec.field(name="blocks per SM", default=None)
    bytes: int | None = None
    sequence_number: int | None = msgspec.field(name="Sequence number", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=msgspec.Raw(b""))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]
    schemaVersion: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    trace_id: Any = None
    distributedInfo: Any = None


# Event categories, lower-cased, to the table they go to.
KERNEL_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}
OP_CATS = {"cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation"}

_CODE_KERNEL, _CODE_RUNTIME, _CODE_OP = 1, 2, 3


@dataclass
class TraceTables:
    """What a Kineto trace holds, as tables. Times are int64 ns relative to the trace's origin."""

    kernels: pl.DataFrame
    launches: pl.DataFrame
    ops: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)


def read_trace_bytes(path: Path) -> bytes:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a Kineto trace file (.json or .json.gz)")
    data = path.read_bytes()
    if not data:
        raise UserError(f"{path}: file is empty")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise UserError(f"{path}: corrupt or truncated gzip data ({exc})") from None
        if not data.strip():
            raise UserError(f"{path}: file is empty after decompression")
    return data


def _decode(path: Path, data: bytes) -> _Trace:
    start = data.lstrip()[:1]
    try:
        if start == b"[":
            return _Trace(traceEvents=msgspec.json.decode(data, type=list[_Event]))
        if start != b"{":
            raise UserError(f"{path}: not JSON (a Kineto trace starts with '{{' or '[')")
        return msgspec.json.decode(data, type=_Trace)
    except msgspec.ValidationError as exc:
        raise UserError(f"{path}: not a Kineto trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: invalid or truncated JSON: {exc}") from None


def load_kineto(path: Path) -> TraceTables:
    trace = _decode(path, read_trace_bytes(path))
    events = trace.traceEvents
    meta = {
        "schema_version": trace.schemaVersion,
        "device_properties": trace.deviceProperties or [],
        "base_time_ns": trace.baseTimeNanoseconds,
        "cuda_runtime_version": trace.cuda_runtime_version,
        "cuda_driver_version": trace.cuda_driver_version,
        "cupti_version": trace.cupti_version,
        "trace_id": trace.trace_id,
        "distributed_info": trace.distributedInfo,
        "event_count": len(events),
    }
    codes = _category_codes(events)
    kernel_events = [events[i] for i in np.flatnonzero(codes == _CODE_KERNEL)]
    runtime_events = [events[i] for i in np.flatnonzero(codes == _CODE_RUNTIME)]
    op_events = [events[i] for i in np.flatnonzero(codes == _CODE_OP)]
    del events, trace
    origin_us = _origin_us(kernel_events, runtime_events, op_events)
    meta["origin_us"] = origin_us
    return TraceTables(
        kernels=_kernel_table(kernel_events, origin_us),
        launches=_launch_table(runtime_events, origin_us),
        ops=_op_table(op_events, origin_us),
        meta=meta,
    )


def _category_codes(events: list[_Event]) -> np.ndarray:
    lookup: dict[str, int] = {}
    for cat in {e.cat for e in events}:
        low = cat.lower()
        if low in KERNEL_KINDS:
            lookup[cat] = _CODE_KERNEL
        elif low in RUNTIME_CATS:
            lookup[cat] = _CODE_RUNTIME
        elif low in OP_CATS:
            lookup[cat] = _CODE_OP
    # Only complete events ("X") with a start time form intervals.
    codes = [lookup.get(e.cat, 0) if e.ph == "X" and e.ts is not None else 0 for e in events]
    return np.fromiter(codes, dtype=np.int8, count=len(codes))


def _origin_us(*groups: list[_Event]) -> float:
    firsts = [min(e.ts for e in group) for group in groups if group]
    return min(firsts) if firsts else 0.0


def _times_ns(events: list[_Event], origin_us: float) -> tuple[np.ndarray, np.ndarray]:
    ts = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
    dur = np.fromiter((e.dur or 0.0 for e in events), dtype=np.float64, count=len(events))
    start = np.rint((ts - origin_us) * 1e3).astype(np.int64)
    return start, np.rint(dur * 1e3).astype(np.int64)


def _as_int(values: list[int | str]) -> list[int | None]:
    """pid/tid are ints in Kineto traces, strings in some synthetic lanes; strings become None."""
    return [v if isinstance(v, int) else None for v in values]


def _external_id(args: _Args | None) -> int | None:
    if args is None:
        return None
    return args.external_id if args.external_id is not None else args.external_id_lower


def _kernel_table(events: list[_Event], origin_us: float) -> pl.DataFrame:
    start, dur = _times_ns(events, origin_us)
    args = [e.args or _EMPTY_ARGS for e in events]
    grids = [a.grid or (None, None, None) for a in args]
    blocks = [a.block or (None, None, None) for a in args]
    return pl.DataFrame(
        {
            "name": [e.name for e in events],
            "kind": [KERNEL_KINDS[e.cat.lower()] for e in events],
            "device": [a.device if a.device is not None else _pid_int(e.pid) for e, a in zip(events, args, strict=True)],
            "stream": [a.stream if a.stream is not None else _pid_int(e.tid) for e, a in zip(events, args, strict=True)],
            "start_ns": start,
            "dur_ns": dur,
            "correlation": [a.correlation for a in args],
            "external_id": [_external_id(a) for a in args],
            "grid_x": [g[0] for g in grids],
            "grid_y": [g[1] for g in grids],
            "grid_z": [g[2] for g in grids],
            "block_x": [b[0] for b in blocks],
            "block_y": [b[1] for b in blocks],
            "block_z": [b[2] for b in blocks],
            "registers_per_thread": [a.registers for a in args],
            "shared_memory_bytes": [a.shared_memory for a in args],
            "est_occupancy_pct": [a.occupancy for a in args],
            "bytes": [a.bytes for a in args],
        },
        schema_overrides=_KERNEL_SCHEMA,
    )


def _launch_table(events: list[_Event], origin_us: float) -> pl.DataFrame:
    start, dur = _times_ns(events, origin_us)
    return pl.DataFrame(
        {
            "api": [e.name for e in events],
            "pid": _as_int([e.pid for e in events]),
            "tid": _as_int([e.tid for e in events]),
            "start_ns": start,
            "dur_ns": dur,
            "correlation": [e.args.correlation if e.args else None for e in events],
            "external_id": [_external_id(e.args) for e in events],
        },
        schema_overrides={"pid": pl.Int64, "tid": pl.Int64, "correlation": pl.Int64, "external_id": pl.Int64},
    )


def _op_table(events: list[_Event], origin_us: float) -> pl.DataFrame:
    start, dur = _times_ns(events, origin_us)
    args = [e.args or _EMPTY_ARGS for e in events]
    return pl.DataFrame(
        {
            "name": [e.name for e in events],
            "cat": [OP_CATS[e.cat.lower()] for e in events],
            "pid": _as_int([e.pid for e in events]),
            "tid": _as_int([e.tid for e in events]),
            "start_ns": start,
            "dur_ns": dur,
            "external_id": [_external_id(a) for a in args],
            "sequence_number": [a.sequence_number for a in args],
            "input_dims": _raw_column([a.input_dims or a.input_dims_old for a in args]),
            "input_types": _raw_column([a.input_type for a in args]),
        },
        schema_overrides={
            "pid": pl.Int64,
            "tid": pl.Int64,
            "external_id": pl.Int64,
            "sequence_number": pl.Int64,
        },
    )


def _raw_column(raws: list[msgspec.Raw]) -> pl.Series:
    """Undecoded JSON (shapes, dtypes) kept as text; conversion is vectorised, empty becomes null."""
    return pl.Series([bytes(r) or None for r in raws], dtype=pl.Binary).cast(pl.String)


def _pid_int(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


_EMPTY_ARGS = _Args()

_KERNEL_SCHEMA = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "grid_x": pl.Int64,
    "grid_y": pl.Int64,
    "grid_z": pl.Int64,
    "block_x": pl.Int64,
    "block_y": pl.Int64,
    "block_z": pl.Int64,
    "registers_per_thread": pl.Int64,
    "shared_memory_bytes": pl.Int64,
    "est_occupancy_pct": pl.Float64,
    "bytes": pl.Int64,
}
