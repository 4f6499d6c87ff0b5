"""Read a Kineto (torch.profiler / Chrome trace) JSON file into columnar tables.

Decoding is typed (msgspec): only the fields kernelscope uses are materialised, everything else is
skipped by the decoder. Handles .json and .json.gz, the object form ({"traceEvents": [...]}) and the bare
array form, current lower-case categories and the older capitalised ones ("Kernel", "Runtime", "Operator").
"""

from __future__ import annotations

import contextlib
import gzip
import mmap
import multiprocessing
import os
import shutil
import tempfile
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
import polars as pl

from kernelscope.errors import UserError
from kernelscope.load.input_checks import check_input_file

T = TypeVar("T")


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    # Left undecoded here: decoding args per event category afterwards, with a struct of just the fields
    # that category needs, is about twice as fast as one struct for all events.
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _KernelArgs(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    occupancy: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: int | None = None


class _RuntimeArgs(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None


class _OpArgs(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    sequence_number: int | None = msgspec.field(name="Sequence number", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=msgspec.Raw(b""))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw(b""))


# Event categories, lower-cased, to the table they go to.
KERNEL_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}
OP_CATS = {"cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation"}

_CODE_KERNEL, _CODE_RUNTIME, _CODE_OP = 1, 2, 3

# Ops whose scalar arguments ("Concrete Inputs") the cost models read; others' are not kept.
CONCRETE_INPUT_OPS = frozenset({
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_attention_math", "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    "aten::_cudnn_attention_forward", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::conv2d", "aten::conv1d",
    "aten::mean", "aten::sum", "aten::amax", "aten::max", "aten::argmax", "aten::topk", "aten::_softmax",
})


@dataclass
class TraceTables:
    """What a Kineto trace holds, as tables. Times are int64 ns relative to the trace's origin."""

    kernels: pl.DataFrame
    launches: pl.DataFrame
    ops: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)


@contextmanager
def open_trace_text(path: Path) -> Iterator[tuple[Path, mmap.mmap]]:
    """The trace's JSON text as a memory map (no copy into the heap) and the plain file behind it:
    the file itself, or, for gzip input, a temporary file it is decompressed into by streaming."""
    check_input_file(path, "a Kineto trace file (.json or .json.gz)")
    with path.open("rb") as f:
        compressed = f.read(2) == b"\x1f\x8b"
    if not compressed:
        with _mapped(path) as data:
            yield path, data
        return
    with tempfile.TemporaryDirectory(prefix="kernelscope-trace-") as tmp:
        plain = Path(tmp) / "trace.json"
        try:
            with gzip.open(path, "rb") as fin, plain.open("wb") as fout:
                shutil.copyfileobj(fin, fout, length=1 << 22)
        except (OSError, EOFError, zlib.error) as exc:
            raise UserError(f"{path}: corrupt or truncated gzip data ({exc})") from None
        if plain.stat().st_size == 0:
            raise UserError(f"{path}: file is empty after decompression")
        with _mapped(plain) as data:
            yield plain, data


@contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap]:
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        yield data


class _Document(msgspec.Struct):
    """The trace object with its event array left as raw text, to be decoded in chunks."""

    traceEvents: msgspec.Raw
    schemaVersion: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    trace_id: Any = None
    distributedInfo: Any = None


CHUNK_BYTES = 16 << 20
PARALLEL_BYTES = 64 << 20
# How Kineto separates events ("  },\n  {"); compact writers use "},{" or "}, {".
_SEPARATORS = (b"},\n  {", b"},{", b"}, {", b"},\n{")


def load_kineto(path: Path, workers: int | None = None) -> TraceTables:
    """Read one Kineto trace. The event array is decoded in chunks of about CHUNK_BYTES (bounded memory);
    with workers > 1 (default: 2 for traces over PARALLEL_BYTES on a machine with 2+ cores) a helper
    process decodes part of the chunks."""
    with open_trace_text(path) as (plain, data):
        fields, offset, length = _locate_events(path, data)
        ranges = _chunk_ranges(data, offset, length)
        if workers is None:
            workers = min(2, os.cpu_count() or 1) if length > PARALLEL_BYTES else 1
        try:
            parts = _decode_chunks(path, plain, data, ranges, workers)
        except _ChunkError:
            parts = _decode_chunks(path, plain, data, [(offset, offset + length, True, True)], 1)
    tables = _assemble(parts, _metadata(fields))
    if tables.kernels.height == 0 and not (tables.ops["cat"] == "cpu_op").any():
        raise UserError(f"{path}: no kernels, memory copies or CPU ops in this trace")
    return tables


def _locate_events(path: Path, data: bytes | mmap.mmap) -> tuple[dict[str, Any], int, int]:
    """The document's other fields and the byte range of its event array (brackets included)."""
    first = data[:4096].lstrip()[:1]
    if first == b"[":
        start = data.find(b"[")
        return {}, start, len(data) - start
    if first != b"{":
        raise UserError(f"{path}: not JSON (a Kineto trace starts with '{{' or '[')")
    located = _locate_by_text(data)
    if located is not None:
        return located
    try:  # Slow but exact: let the decoder find the array (it scans the whole text once more).
        document = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as exc:
        raise UserError(f"{path}: not a Kineto trace: {exc}") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: invalid or truncated JSON: {exc}") from None
    # Views into the map must all be released before returning or raising, or the map cannot close.
    fields = msgspec.structs.asdict(document)
    raw = fields.pop("traceEvents")
    del document
    with memoryview(raw) as view:
        is_list = view[:1].tobytes() == b"["
        length = len(view)
        offset = np.frombuffer(view, dtype=np.uint8).ctypes.data - np.frombuffer(data, dtype=np.uint8).ctypes.data
    del raw
    if not is_list:
        raise UserError(f"{path}: not a Kineto trace: 'traceEvents' is not a list")
    return fields, int(offset), int(length)


def _locate_by_text(data: bytes | mmap.mmap) -> tuple[dict[str, Any], int, int] | None:
    """Fast path for Kineto's layout: a few fields, then "traceEvents": [...], then a short tail. The
    fields before and after the array are decoded on their own; None if the layout is different."""
    key = data.find(b'"traceEvents"')
    if key < 0:
        return None
    start = data.find(b"[", key)
    if start < 0 or data[key + len(b'"traceEvents"') : start].strip() != b":":
        return None
    tail_from = max(start, len(data) - (1 << 16))
    end = data.rfind(b"]", tail_from)
    while end > start:
        tail = data[end + 1 :].strip()
        if tail == b"}" or tail.startswith(b","):
            try:
                head = msgspec.json.decode(data[:key].rstrip().rstrip(b",") + b"}")
                rest = msgspec.json.decode(b"{" + tail[1:]) if tail.startswith(b",") else {}
            except msgspec.DecodeError:
                return None
            if isinstance(head, dict) and isinstance(rest, dict):
                return {**head, **rest}, start, end + 1 - start
            return None
        end = data.rfind(b"]", tail_from, end)
    return None


def _chunk_ranges(data: bytes, offset: int, length: int) -> list[tuple[int, int, bool, bool]]:
    """(start, end, opens_array, closes_array) byte ranges that split the event array between events."""
    end = offset + length
    ranges, start = [], offset
    target = offset + CHUNK_BYTES
    while target < end - CHUNK_BYTES // 4:
        cut = next((i for i in (data.find(sep, target, end) for sep in _SEPARATORS) if i >= 0), -1)
        if cut < 0:
            break
        ranges.append((start, cut + 1, start == offset, False))
        start = data.find(b"{", cut + 1)
        target = start + CHUNK_BYTES
    ranges.append((start, end, start == offset, True))
    return ranges


class _ChunkError(Exception):
    """A chunk did not decode: the split points were wrong for this file; decode it whole instead."""


def _decode_chunks(
    path: Path, plain: Path, data: mmap.mmap, ranges: list[tuple[int, int, bool, bool]], workers: int
) -> list[dict[str, Any]]:
    single = len(ranges) == 1
    if workers <= 1 or single:
        return [_chunk_tables(str(path), _chunk_text(data, *r), single) for r in ranges]
    # The parent takes chunks from the front, helper processes from the back, until they meet (a shared
    # counter pair), so a helper that starts late simply takes fewer. Helpers map the file themselves:
    # no chunk text crosses processes, only finished tables come back.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    bounds = ctx.Array("q", [0, len(ranges)])
    results: dict[int, dict[str, Any]] = {}
    spool = tempfile.mkdtemp(prefix="kernelscope-chunks-")
    try:
        with ProcessPoolExecutor(workers - 1, mp_context=ctx, initializer=_set_bounds, initargs=(bounds,)) as pool:
            futures: list = []
            # Submitting starts the fork server (hundreds of ms): do it off the main thread.
            submitter = threading.Thread(
                target=lambda: futures.extend(
                    pool.submit(_helper_chunks, str(path), str(plain), ranges, spool) for _ in range(workers - 1)
                )
            )
            submitter.start()
            while (index := _take(bounds, from_back=False)) is not None:
                results[index] = _chunk_tables(str(path), _chunk_text(data, *ranges[index]), False)
            submitter.join()
            for future in futures:
                with contextlib.suppress(BrokenProcessPool, OSError, EOFError):
                    for index, files in future.result().items():
                        results[index] = {k: pl.read_ipc(v) if isinstance(v, str) else v for k, v in files.items()}
        # A helper that could not start or died (e.g. the main module cannot be re-imported, as for code
        # run from stdin) leaves chunks undone: finish them here.
        for index in range(len(ranges)):
            if index not in results:
                results[index] = _chunk_tables(str(path), _chunk_text(data, *ranges[index]), False)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return [results[i] for i in range(len(ranges))]


_BOUNDS: Any = None


def _set_bounds(bounds: Any) -> None:
    global _BOUNDS
    _BOUNDS = bounds


def _take(bounds: Any, from_back: bool) -> int | None:
    with bounds.get_lock():
        front, back = bounds[0], bounds[1]
        if front >= back:
            return None
        if from_back:
            bounds[1] = back - 1
            return back - 1
        bounds[0] = front + 1
        return front


def _helper_chunks(
    path: str, plain: str, ranges: list[tuple[int, int, bool, bool]], spool: str
) -> dict[int, dict[str, Any]]:
    """A helper's loop, as one task (the executor's feeder thread gets little time while the parent
    decodes, holding the GIL, so a helper must not wait for further work items). Tables go back as
    Arrow IPC files that the parent maps: far cheaper than pickling them through a pipe."""
    done: dict[int, dict[str, Any]] = {}
    with _mapped(Path(plain)) as data:
        while (index := _take(_BOUNDS, from_back=True)) is not None:
            tables = _chunk_tables(path, _chunk_text(data, *ranges[index]), False)
            for name in ("kernels", "launches", "ops"):
                file = os.path.join(spool, f"{index}-{name}.arrow")
                tables[name].write_ipc(file, compression="uncompressed")
                tables[name] = file
            done[index] = tables
    return done


def _chunk_text(data: mmap.mmap, start: int, stop: int, opens: bool, closes: bool) -> bytearray:
    """One chunk of events as a JSON array (a single copy out of the map)."""
    text = bytearray() if opens else bytearray(b"[")
    text += memoryview(data)[start:stop]
    if not closes:
        text += b"]"
    return text


def _chunk_tables(path: str, text: bytes | bytearray, single: bool) -> dict[str, Any]:
    try:
        events = msgspec.json.decode(text, type=list[_Event])
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        if not single:
            raise _ChunkError from None
        kind = "not a Kineto trace" if isinstance(exc, msgspec.ValidationError) else "invalid or truncated JSON"
        raise UserError(f"{path}: {kind}: {exc}") from None
    del text
    codes = _category_codes(events)
    kernel_events = _select(events, codes, _CODE_KERNEL)
    runtime_events = _select(events, codes, _CODE_RUNTIME)
    op_events = _select(events, codes, _CODE_OP)
    count = len(events)
    del events
    return {
        "event_count": count,
        "kernels": _kernel_table(kernel_events, _decode_args(path, kernel_events, _KernelArgs)),
        "launches": _launch_table(runtime_events, _decode_args(path, runtime_events, _RuntimeArgs)),
        "ops": _op_table(op_events, _decode_args(path, op_events, _OpArgs)),
    }


def _metadata(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": fields.get("schemaVersion"),
        "device_properties": fields.get("deviceProperties") or [],
        "base_time_ns": fields.get("baseTimeNanoseconds"),
        "cuda_runtime_version": fields.get("cuda_runtime_version"),
        "cuda_driver_version": fields.get("cuda_driver_version"),
        "cupti_version": fields.get("cupti_version"),
        "trace_id": fields.get("trace_id"),
        "distributed_info": fields.get("distributedInfo"),
    }


def _assemble(parts: list[dict[str, Any]], meta: dict[str, Any]) -> TraceTables:
    """Concatenate chunk tables and turn absolute µs starts into int64 ns from the trace's origin."""
    tables = {name: pl.concat([p[name] for p in parts], how="vertical_relaxed") for name in ("kernels", "launches", "ops")}
    firsts = [t["ts_us"].min() for t in tables.values() if t.height]
    origin_us = float(min(firsts)) if firsts else 0.0
    for name, table in tables.items():
        start = ((table["ts_us"].to_numpy() - origin_us) * 1e3).round().astype(np.int64)
        tables[name] = table.with_columns(pl.Series("ts_us", start).alias("start_ns")).drop("ts_us").select(
            _COLUMN_ORDER[name]
        )
    meta = dict(meta, event_count=sum(p["event_count"] for p in parts), origin_us=origin_us)
    return TraceTables(kernels=tables["kernels"], launches=tables["launches"], ops=tables["ops"], meta=meta)


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
    get = lookup.get
    return np.fromiter([get(e.cat, 0) for e in events], dtype=np.int8, count=len(events))


def _select(events: list[_Event], codes: np.ndarray, code: int) -> list[_Event]:
    """Events of one table; only complete events ("X") with a start time form intervals."""
    chosen = map(events.__getitem__, np.flatnonzero(codes == code).tolist())
    return [e for e in chosen if e.ph == "X" and e.ts is not None]


def _decode_args(path: str, events: list[_Event], struct: type[T]) -> list[T]:
    decoder = msgspec.json.Decoder(struct)
    try:
        return [decoder.decode(e.args) for e in events]
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise UserError(f"{path}: not a Kineto trace: event args: {exc}") from None


def _times(events: list[_Event]) -> tuple[np.ndarray, np.ndarray]:
    """Start in µs as written (float64), duration in int64 ns."""
    ts = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
    dur = np.fromiter((e.dur or 0.0 for e in events), dtype=np.float64, count=len(events))
    return ts, np.rint(dur * 1e3).astype(np.int64)


def _as_int(values: list[int | str]) -> list[int | None]:
    """pid/tid are ints in Kineto traces, strings in some synthetic lanes; strings become None."""
    return [v if isinstance(v, int) else None for v in values]


def _external_ids(args: list[Any]) -> list[int | None]:
    return [a.external_id if a.external_id is not None else a.external_id_old for a in args]


def _kernel_table(events: list[_Event], args: list[_KernelArgs]) -> pl.DataFrame:
    start, dur = _times(events)
    grids = [a.grid or (None, None, None) for a in args]
    blocks = [a.block or (None, None, None) for a in args]
    return pl.DataFrame(
        {
            "name": [e.name for e in events],
            "kind": [KERNEL_KINDS[e.cat.lower()] for e in events],
            "device": [a.device if a.device is not None else _pid_int(e.pid) for e, a in zip(events, args, strict=True)],
            "stream": [a.stream if a.stream is not None else _pid_int(e.tid) for e, a in zip(events, args, strict=True)],
            "ts_us": start,
            "dur_ns": dur,
            "correlation": [a.correlation for a in args],
            "external_id": _external_ids(args),
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
        schema_overrides={"name": pl.String, "kind": pl.String, "ts_us": pl.Float64, "dur_ns": pl.Int64,
                          **_KERNEL_SCHEMA},
    )


def _launch_table(events: list[_Event], args: list[_RuntimeArgs]) -> pl.DataFrame:
    start, dur = _times(events)
    return pl.DataFrame(
        {
            "api": [e.name for e in events],
            "pid": _as_int([e.pid for e in events]),
            "tid": _as_int([e.tid for e in events]),
            "ts_us": start,
            "dur_ns": dur,
            "correlation": [a.correlation for a in args],
            "external_id": _external_ids(args),
        },
        schema_overrides={"api": pl.String, "pid": pl.Int64, "tid": pl.Int64, "ts_us": pl.Float64,
                          "dur_ns": pl.Int64, "correlation": pl.Int64, "external_id": pl.Int64},
    )


def _op_table(events: list[_Event], args: list[_OpArgs]) -> pl.DataFrame:
    start, dur = _times(events)
    return pl.DataFrame(
        {
            "name": [e.name for e in events],
            "cat": [OP_CATS[e.cat.lower()] for e in events],
            "pid": _as_int([e.pid for e in events]),
            "tid": _as_int([e.tid for e in events]),
            "ts_us": start,
            "dur_ns": dur,
            "external_id": _external_ids(args),
            "sequence_number": [a.sequence_number for a in args],
            "input_dims": _raw_column([bytes(a.input_dims or a.input_dims_old) for a in args]),
            "input_types": _raw_column([bytes(a.input_type) for a in args]),
            # Scalar arguments matter to a few cost models (is_causal, strides); kept only for those ops.
            "concrete_inputs": _raw_column(
                [bytes(a.concrete_inputs) if e.name in CONCRETE_INPUT_OPS else b"" for e, a in zip(events, args, strict=True)]
            ),
        },
        schema_overrides={
            "name": pl.String,
            "cat": pl.String,
            "ts_us": pl.Float64,
            "dur_ns": pl.Int64,
            "input_dims": pl.String,
            "input_types": pl.String,
            "concrete_inputs": pl.String,
            "pid": pl.Int64,
            "tid": pl.Int64,
            "external_id": pl.Int64,
            "sequence_number": pl.Int64,
        },
    )


def _raw_column(raws: list[bytes]) -> pl.Series:
    """Undecoded JSON (shapes, dtypes) kept as text; conversion is vectorised, empty becomes null."""
    text = pl.Series(raws, dtype=pl.Binary).cast(pl.String)
    return text.set(text == "", None)


def _pid_int(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


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

_COLUMN_ORDER = {
    "kernels": ["name", "kind", "device", "stream", "start_ns", "dur_ns", "correlation", "external_id",
                "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                "shared_memory_bytes", "est_occupancy_pct", "bytes"],
    "launches": ["api", "pid", "tid", "start_ns", "dur_ns", "correlation", "external_id"],
    "ops": ["name", "cat", "pid", "tid", "start_ns", "dur_ns", "external_id", "sequence_number", "input_dims",
            "input_types", "concrete_inputs"],
}
