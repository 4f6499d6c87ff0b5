"""Decoded Kineto events → the kernels, launches and ops tables of one chunk: one column at a time from the events' fields, repeated strings interned, thread and correlation ids read as numbers."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import polars as pl

from kernelscope.contracts.tables import (
    RAW_ARGUMENT,
    TRACE_KERNEL_COLUMNS,
    TRACE_LAUNCH_COLUMNS,
    TRACE_OP_COLUMNS,
)
from kernelscope.load.kineto.event_records import (
    KERNEL_KINDS,
    OP_CATS,
    KernelArgs,
    OpArgs,
    RuntimeArgs,
    Timed,
    decode_args,
    keeps_concrete_inputs,
)
from kernelscope.load.names import bounded, bounded_all


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
def kernel_table(timed: Timed, args: list[KernelArgs], dropped: dict[str, int]) -> pl.DataFrame:
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


def launch_table(timed: Timed, args: list[RuntimeArgs], dropped: dict[str, int]) -> pl.DataFrame:
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


def op_table(timed: Timed, dropped: dict[str, int]) -> pl.DataFrame:
    """CPU ops and annotations (with their args) first, then Python frames (no args), in event order each."""
    frames = np.array([e.cat == "python_function" for e in timed.events], dtype=bool)
    ops, python = timed.where(~frames), timed.where(frames)
    args = decode_args(ops.events, OpArgs, dropped)
    blank = msgspec.Raw(b"")
    all_args = args + [OpArgs()] * len(python.events)  # shared and never changed
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
