"""Decoded Kineto events → the kernels, launches and ops tables of one chunk.

Decoding is typed (msgspec): only the fields kernelscope uses are materialised, everything else is skipped by
the decoder, and event args are decoded per category afterwards with a struct of just that category's fields
(about twice as fast as one struct for all events). Categories are matched case-insensitively: torch ≤ 1.9
writes `Kernel`, `Runtime`, `Operator`, `Memcpy`, `Memset`.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import msgspec
import numpy as np
import polars as pl

from kernelscope.cycles import cycle_collection_paused
from kernelscope.errors import UserError
from kernelscope.load.kineto.event_records import (
    KERNEL_KINDS,
    MAX_ABS_TS_US,
    MAX_DUR_US,
    OP_CATS,
    RUNTIME_CATS,
    UNREAD_DEVICE_CATS,
    KernelArgs,
    RuntimeArgs,
    Timed,
    TraceEvent,
    decode_args,
)
from kernelscope.load.kineto.event_tables import kernel_table, launch_table, op_table
from kernelscope.load.kineto.marks import marks_of_events
from kernelscope.load.kineto.schema_errors import describe

_CODE_KERNEL, _CODE_RUNTIME, _CODE_OP, _CODE_UNREAD = 1, 2, 3, 4


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
            events = msgspec.json.decode(text, type=list[TraceEvent])
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:
            if not invalid_utf8(exc):
                raise
            # Invalid UTF-8 inside a string: the bytes become U+FFFD rather than the whole trace being refused.
            events = msgspec.json.decode(bytes(text).decode("utf-8", "replace").encode("utf-8"), type=list[TraceEvent])
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
        "kernels": kernel_table(kernel_events, decode_args(kernel_events.events, KernelArgs, dropped), dropped),
        "launches": launch_table(runtime_events, decode_args(runtime_events.events, RuntimeArgs, dropped),
                                  dropped),
        "ops": op_table(op_events, dropped),
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


def _usable(events: list[TraceEvent], dropped: dict[str, int]) -> Timed:
    """Events whose start and duration are finite and within the bounds above."""
    # None becomes NaN here (only None can: JSON has no NaN); _select has already left out events without ts.
    ts = np.array([e.ts for e in events], dtype=np.float64)
    dur = np.nan_to_num(np.array([e.dur for e in events], dtype=np.float64), nan=0.0)
    timed = Timed(events, ts, dur)
    if not events:
        return timed
    with np.errstate(invalid="ignore"):
        good = (np.abs(ts) <= MAX_ABS_TS_US) & (dur >= 0) & (dur <= MAX_DUR_US)
    bad = int(len(events) - good.sum())
    if not bad:
        return timed
    dropped["unusable time or duration"] = dropped.get("unusable time or duration", 0) + bad
    return timed.where(good)


def _category_codes(events: list[TraceEvent]) -> np.ndarray:
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


def _select(events: list[TraceEvent], codes: np.ndarray, code: int) -> list[TraceEvent]:
    """Events of one table; only complete events ("X") with a start time form intervals."""
    chosen = map(events.__getitem__, np.flatnonzero(codes == code).tolist())
    return [e for e in chosen if e.ph == "X" and e.ts is not None]


