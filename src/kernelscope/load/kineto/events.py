"""Decoded Kineto events → the kernels, launches and ops tables of one chunk.

Decoding is typed (msgspec): only the fields kernelscope uses are materialised, everything else is skipped by
the decoder, and event args are decoded per category afterwards with a struct of just that category's fields
(about twice as fast as one struct for all events). Categories are matched case-insensitively: torch ≤ 1.9
writes `Kernel`, `Runtime`, `Operator`, `Memcpy`, `Memset`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any, TypeVar

import msgspec
import numpy as np
import polars as pl

from kernelscope.contracts.tables import (
    RAW_ARGUMENT,
    TRACE_KERNEL_COLUMNS,
    TRACE_LAUNCH_COLUMNS,
    TRACE_OP_COLUMNS,
)
from kernelscope.cycles import cycle_collection_paused
from kernelscope.errors import UserError
from kernelscope.load import knowledge
from kernelscope.load.kineto.marks import marks_of_events
from kernelscope.load.kineto.schema_errors import describe
from kernelscope.load.names import bounded, bounded_all

T = TypeVar("T")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = 0
    tid: int | str | None = 0
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"{}")
    id: msgspec.Raw = msgspec.Raw(b"null")  # flow events' id, any JSON (marks.py)


class _KernelArgs(msgspec.Struct, gc=False):
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
    # Collectives (NCCL kernels in torch ≥ 2.4 traces): what the kernel communicates.
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_elems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_elems: int | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    process_group: str | None = msgspec.field(name="Process Group Name", default=None)


class _RuntimeArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    kernel: str | None = None  # ROCm names the kernel a launch call launches (CUDA does not)


class _OpArgs(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_old: int | None = msgspec.field(name="external id", default=None)
    sequence_number: int | None = msgspec.field(name="Sequence number", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=msgspec.Raw(b""))
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw(b""))
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw(b""))


# Event categories, lower-cased, to the table they go to. MTIA's command-processor events are its kernels.
KERNEL_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
                "memset": "memset", "mtia_ccp_events": "kernel"}
RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime", "mtia_runtime"}
OP_CATS = {"cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "annotation", "python_function": "python"}
# Device-side activity no table holds: ranges measured on the device (CUPTI's range profiler) and device-side
# copies of user annotations. Counted in the trace's metadata, so a run without kernels can say what it had.
UNREAD_DEVICE_CATS = {"cuda_profiler_range", "gpu_user_annotation"}

_CODE_KERNEL, _CODE_RUNTIME, _CODE_OP, _CODE_UNREAD = 1, 2, 3, 4

# Ops whose scalar arguments ("Concrete Inputs") the cost models read; others' are not kept.
CONCRETE_INPUT_OPS = frozenset({
    "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_attention_math", "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
    "aten::_cudnn_attention_forward", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::conv2d", "aten::conv1d",
    "aten::mean", "aten::sum", "aten::amax", "aten::max", "aten::argmax", "aten::topk", "aten::_softmax",
}) | frozenset(knowledge.cost_models().get("scalar_ops", ()))  # serving ops whose scalars data/cost_models.toml reads
# Kernels torch.compile generates, recorded as ops: their scalars are the loop sizes (xnumel, rnumel).
GENERATED_KERNEL_PREFIX = "triton_"


def keeps_concrete_inputs(name: str) -> bool:
    return name in CONCRETE_INPUT_OPS or name.startswith(GENERATED_KERNEL_PREFIX)


class ChunkError(Exception):
    """A chunk did not decode: a split point was wrong for this file (or the file is broken)."""


def invalid_utf8(exc: Exception) -> bool:
    """The decoder met bytes that are not UTF-8: msgspec up to 0.22 raises UnicodeDecodeError, later versions a
    DecodeError that says so."""
    return isinstance(exc, UnicodeDecodeError) or (isinstance(exc, msgspec.DecodeError)
                                                   and "utf-8" in str(exc).lower())


def decode_chunk(path: str, text: bytes | bytearray, final: bool) -> dict[str, Any]:
    """One chunk's tables (ts still absolute µs, in `ts_us`), its event count and the device activity it skipped.
    A chunk that does not decode raises ChunkError (a split point of chunks.py was wrong), or, when `final` (the whole, exactly located
    array), the one-line error naming the file."""
    # The chunk's objects hold no cycles; collections they trigger were a tenth of the decoding time (the structs
    # above are not tracked at all, gc=False, for the same reason).
    with cycle_collection_paused():
        return _decode_chunk(path, text, final)


def _decode_chunk(path: str, text: bytes | bytearray, final: bool) -> dict[str, Any]:
    dropped: dict[str, int] = {}
    try:
        try:
            events = msgspec.json.decode(text, type=list[_Event])
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            if not invalid_utf8(exc):
                raise
            # Invalid UTF-8 inside a string: the bytes become U+FFFD rather than the whole trace being refused.
            events = msgspec.json.decode(bytes(text).decode("utf-8", "replace").encode("utf-8"), type=list[_Event])
            dropped["invalid UTF-8 repaired"] = 1
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        if not final:
            raise ChunkError from None
        kind = "not a Kineto trace" if isinstance(exc, msgspec.ValidationError) else "invalid or truncated JSON"
        detail = ("nested too deeply" if isinstance(exc, RecursionError)
                  else describe(str(exc)) if isinstance(exc, msgspec.ValidationError) else str(exc))
        raise UserError(f"{path}: {kind}: {detail}") from None
    del text
    marks = marks_of_events(events)
    codes = _category_codes(events)
    kernel_events = _usable(_select(events, codes, _CODE_KERNEL), dropped)
    runtime_events = _usable(_select(events, codes, _CODE_RUNTIME), dropped)
    op_events = _usable(_select(events, codes, _CODE_OP), dropped)
    unread: dict[str, int] = {}
    for index in np.flatnonzero(codes == _CODE_UNREAD).tolist():
        cat = events[index].cat.lower()
        unread[cat] = unread.get(cat, 0) + 1
    count = len(events)
    del events
    tables = {
        "kernels": _kernel_table(kernel_events, _decode_args(kernel_events.events, _KernelArgs, dropped), dropped),
        "launches": _launch_table(runtime_events, _decode_args(runtime_events.events, _RuntimeArgs, dropped),
                                  dropped),
        "ops": _op_table(op_events, dropped),
    }
    return {"event_count": count, "unread": unread, "dropped": dropped, "marks": marks,
            **{name: without_null_buffers(table) for name, table in tables.items()}}


def without_null_buffers(table: pl.DataFrame) -> pl.DataFrame:
    """The table with each column that holds no value at all (most of a kernel's args in most traces: collective
    fields, sizes a trace did not record) as a constant null, which takes no memory per row, here or once the
    chunks are concatenated."""
    empty = empty_columns(table)
    if not empty:
        return table
    return table.with_columns(pl.lit(None, dtype=dtype).alias(name) for name, dtype in empty.items())


def empty_columns(table: pl.DataFrame) -> dict[str, pl.DataType]:
    """The columns of a non-empty table that hold no value at all, with their types."""
    if table.height == 0:
        return {}
    return {name: column.dtype for name, column in table.to_dict().items() if column.null_count() == table.height}


# Times a trace can hold: |ts| within 4e15 µs (127 years around its epoch: any difference of two still fits int64
# ns) and durations from 0 to 1e12 µs (11 days). Anything else is a corrupt event, left out and counted.
MAX_ABS_TS_US = 4e15
MAX_DUR_US = 1e12


@dataclass
class _Timed:
    """One table's events with their starts (µs as written) and durations (µs; missing counts as 0)."""

    events: list[_Event]
    ts: np.ndarray
    dur: np.ndarray

    def where(self, mask: np.ndarray) -> _Timed:
        return _Timed([e for e, keep in zip(self.events, mask.tolist(), strict=True) if keep], self.ts[mask],
                      self.dur[mask])

    def dur_ns(self) -> np.ndarray:
        return np.rint(self.dur * 1e3).astype(np.int64)


def _usable(events: list[_Event], dropped: dict[str, int]) -> _Timed:
    """Events whose start and duration are finite and within the bounds above."""
    # None becomes NaN here (only None can: JSON has no NaN); _select has already left out events without ts.
    ts = np.array([e.ts for e in events], dtype=np.float64)
    dur = np.nan_to_num(np.array([e.dur for e in events], dtype=np.float64), nan=0.0)
    timed = _Timed(events, ts, dur)
    if not events:
        return timed
    with np.errstate(invalid="ignore"):
        good = (np.abs(ts) <= MAX_ABS_TS_US) & (dur >= 0) & (dur <= MAX_DUR_US)
    bad = int(len(events) - good.sum())
    if not bad:
        return timed
    dropped["unusable time or duration"] = dropped.get("unusable time or duration", 0) + bad
    return timed.where(good)


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
        elif low in UNREAD_DEVICE_CATS:
            lookup[cat] = _CODE_UNREAD
    get = lookup.get
    return np.fromiter(map(get, [e.cat for e in events], repeat(0)), dtype=np.int8, count=len(events))


def _select(events: list[_Event], codes: np.ndarray, code: int) -> list[_Event]:
    """Events of one table; only complete events ("X") with a start time form intervals."""
    chosen = map(events.__getitem__, np.flatnonzero(codes == code).tolist())
    return [e for e in chosen if e.ph == "X" and e.ts is not None]


def _decode_args(events: list[_Event], struct: type[T], dropped: dict[str, int]) -> list[T]:
    """Each event's args as `struct`; an event whose args do not fit (a grid that is a string, an id that is an
    object) keeps its name and times with empty args, counted as malformed."""
    decoder = msgspec.json.Decoder(struct)
    try:
        return [decoder.decode(e.args) for e in events]
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        pass
    out = []
    for e in events:
        try:
            out.append(decoder.decode(e.args))
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            out.append(struct())
            dropped["malformed args"] = dropped.get("malformed args", 0) + 1
    return out


def thread_id(value: int | str | None) -> int | None:
    """A process or thread id as an integer: ints as written; numeric strings (torch ≤ 1.9 writes tids as
    strings) as their number; other strings (synthetic lanes such as "stream 7") as a stable negative code, so
    that events of one lane still share one id."""
    if isinstance(value, int) or value is None:
        return value
    text = value.strip()
    digits = text.removeprefix("-")
    # ASCII digits only ('²'.isdigit() is true) and within int64; anything else is a lane name.
    if digits.isascii() and digits.isdigit() and len(digits) < 19:
        return int(text)
    return -1 - zlib.crc32(text.encode("utf-8", "surrogatepass"))


def _ids(values: list[int | str | None]) -> list[int | None]:
    return _by_value(values, thread_id)


def _by_value(values: list[Any], convert: Callable[[Any], Any]) -> list[Any]:
    """convert(v) for every value, computed once per distinct value (ids and categories repeat)."""
    lookup = {v: convert(v) for v in set(values)}
    return list(map(lookup.__getitem__, values))


def _external_ids(args: list[Any]) -> list[int | None]:
    return [a.external_id if a.external_id is not None else a.external_id_old for a in args]


def _int_only(value: int | str | None) -> int | None:
    return value if isinstance(value, int) else None


def _names(values: list[str], dropped: dict[str, int]) -> pl.Series:
    names, cut = bounded_all(values)
    if cut:
        dropped["name cut to the length limit"] = dropped.get("name cut to the length limit", 0) + cut
    return _interned(names, pl.String)


def _interned(values: list[Any], dtype: pl.DataType, convert: Callable[[pl.Series], pl.Series] | None = None
              ) -> pl.Series:
    """A column of values that repeat (kernel names, shapes): each distinct value is stored once and the rows are
    views of it (Arrow string views), about a fifth of the memory of a copy per row for long kernel names, and
    faster to build. `convert` applies to the distinct values."""
    index: dict[Any, int] = {}
    codes = [index.setdefault(v, len(index)) for v in values]
    distinct = pl.Series(list(index), dtype=dtype)
    if convert is not None:
        distinct = convert(distinct)
    return distinct.gather(pl.Series(codes, dtype=pl.UInt32))


def _dims(values: list[list[int] | None]) -> list[tuple[int | None, int | None, int | None]]:
    return [v if v and len(v) == 3 else (None, None, None) for v in values]


# Tables are built with strict=False: an integer beyond int64 (an id of 2^64 in a corrupt trace) becomes null
# instead of failing the whole file; msgspec has already checked every value's type.
def _kernel_table(timed: _Timed, args: list[_KernelArgs], dropped: dict[str, int]) -> pl.DataFrame:
    events = timed.events
    grids = _dims([a.grid for a in args])
    blocks = _dims([a.block for a in args])
    return pl.DataFrame(
        {
            "name": _names([e.name for e in events], dropped),
            "kind": _by_value([e.cat for e in events], lambda cat: KERNEL_KINDS[cat.lower()]),
            "device": [a.device if a.device is not None else _int_only(e.pid) for e, a in zip(events, args, strict=True)],
            "stream": [a.stream if a.stream is not None else _int_only(e.tid) for e, a in zip(events, args, strict=True)],
            "ts_us": timed.ts,
            "dur_ns": timed.dur_ns(),
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
            "collective": [a.collective for a in args],
            "msg_in_elems": [a.in_elems for a in args],
            "msg_out_elems": [a.out_elems for a in args],
            "group_size": [a.group_size for a in args],
            "msg_dtype": [a.dtype for a in args],
            "process_group": [a.process_group for a in args],
        },
        schema_overrides={**TRACE_KERNEL_COLUMNS, "ts_us": pl.Float64}, strict=False,
    )


def _launch_table(timed: _Timed, args: list[_RuntimeArgs], dropped: dict[str, int]) -> pl.DataFrame:
    events = timed.events
    return pl.DataFrame(
        {
            "api": _names([e.name for e in events], dropped),
            "pid": _ids([e.pid for e in events]),
            "tid": _ids([e.tid for e in events]),
            "ts_us": timed.ts,
            "dur_ns": timed.dur_ns(),
            "correlation": [a.correlation for a in args],
            "external_id": _external_ids(args),
            "kernel_name": [None if a.kernel is None else bounded(a.kernel) for a in args],
        },
        schema_overrides={**TRACE_LAUNCH_COLUMNS, "ts_us": pl.Float64}, strict=False,
    )


def _op_table(timed: _Timed, dropped: dict[str, int]) -> pl.DataFrame:
    """CPU ops and annotations (with their args) first, then Python frames (no args), in event order each."""
    frames = np.array([e.cat == "python_function" for e in timed.events], dtype=bool)
    ops, python = timed.where(~frames), timed.where(frames)
    args = _decode_args(ops.events, _OpArgs, dropped)
    blank = msgspec.Raw(b"")
    all_args = args + [_OpArgs()] * len(python.events)  # shared and never changed
    every = ops.events + python.events
    start = np.concatenate([ops.ts, python.ts])
    dur = np.concatenate([ops.dur_ns(), python.dur_ns()])
    return pl.DataFrame(
        {
            "name": _names([e.name for e in every], dropped),
            "cat": _by_value([e.cat for e in every], lambda cat: OP_CATS[cat.lower()]),
            "pid": _ids([e.pid for e in every]),
            "tid": _ids([e.tid for e in every]),
            "ts_us": start,
            "dur_ns": dur,
            "external_id": _external_ids(all_args),
            "sequence_number": [a.sequence_number for a in all_args],
            "input_dims": _raw_column([bytes(a.input_dims or a.input_dims_old or blank) for a in all_args]),
            "input_types": _raw_column([bytes(a.input_type) for a in all_args]),
            # Scalar arguments matter to a few cost models (is_causal, strides); kept only for those ops.
            "concrete_inputs": _raw_column(
                [bytes(a.concrete_inputs) if keeps_concrete_inputs(e.name) else b"" for e, a in zip(every, all_args,
                                                                                                  strict=True)]),
        },
        schema_overrides={**TRACE_OP_COLUMNS, "ts_us": pl.Float64}, strict=False,
    )


def _raw_column(raws: list[bytes]) -> pl.Series:
    """Undecoded JSON (shapes, dtypes) kept as text; empty becomes null."""
    return _interned(raws, pl.Binary, _text_or_null)


def _text_or_null(raws: pl.Series) -> pl.Series:
    text = raws.cast(pl.String)
    return text.set(text == "", None).cast(RAW_ARGUMENT)
