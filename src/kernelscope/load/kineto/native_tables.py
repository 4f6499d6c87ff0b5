"""The native fast path of chunk decoding (native/kineto_scan.cpp, built on simdjson) → the tables events.py
builds, value for value.

The extension gathers columns as flat buffers and the distinct strings of the chunk once each, so no Python
object is made per event. It declines (None) any chunk it cannot decode exactly as the msgspec path would; the
caller then decodes that chunk with msgspec. Where the extension was not built (no compiler at install, another
platform), `available()` is false and every chunk takes the msgspec path: the tables are the same either way.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from kernelscope.contracts.tables import (
    RAW_ARGUMENT,
    TRACE_KERNEL_COLUMNS,
    TRACE_LAUNCH_COLUMNS,
    TRACE_OP_COLUMNS,
)
from kernelscope.load.kineto import event_records, event_tables, events
from kernelscope.load.names import MAX_NAME, bounded
from kernelscope.load.native_reader import NATIVE_ENV

try:
    from kernelscope.load.kineto import _kineto_scan
except ImportError:  # not built here: the msgspec path decodes every chunk
    _kineto_scan = None
if os.environ.get(NATIVE_ENV) == "0":
    _kineto_scan = None

_NULL_CODE = 0xFFFFFFFF
# The extension's category codes (kineto_scan.cpp, enum Category).
_KERNEL, _RUNTIME, _OP, _UNREAD = 1, 2, 3, 4  # 0: any other category


def _category_codes() -> dict[str, int]:
    codes = {cat: _KERNEL for cat in event_records.KERNEL_KINDS}
    codes |= {cat: _RUNTIME for cat in event_records.RUNTIME_CATS}
    codes |= {cat: _OP for cat in event_records.OP_CATS}
    codes |= {cat: _UNREAD for cat in event_records.UNREAD_DEVICE_CATS}
    return codes


if _kineto_scan is not None:
    _kineto_scan.set_categories(_category_codes())


def available() -> bool:
    return _kineto_scan is not None


def release() -> None:
    """Let go of the buffers the fast path keeps from chunk to chunk (this thread's), once a trace is read."""
    if _kineto_scan is not None:
        _kineto_scan.release()


def decode_native(text: bytes | bytearray | memoryview, opens: bool = True, closes: bool = True
                  ) -> dict[str, Any] | None:
    """One chunk's tables as events.decode_chunk returns them, or None where the msgspec path must decode it.
    `text`: a JSON array of events, or a piece of one (a view of the mapped trace) where `opens`/`closes` say it
    lacks the array's opening or closing bracket."""
    if _kineto_scan is None:
        return None
    scanned = _kineto_scan.scan(text, opens, closes)
    del text  # the view of the map is not needed past the scan (nor kept by an error raised below)
    if scanned is None:
        return None
    return _Chunk(scanned).tables()


class _Chunk:
    def __init__(self, scanned: dict[str, Any]) -> None:
        self.scanned = scanned
        self.strings: list[str] = scanned["strings"]
        self.dropped: dict[str, int] = {}
        self._names_bounded: tuple[pl.Series, np.ndarray] | None = None  # the strings bounded; which were cut

    def tables(self) -> dict[str, Any]:
        s = self.scanned
        if s["unusable"]:
            self._count("unusable time or duration", s["unusable"])
        malformed_kernels, malformed_launches, malformed_ops = s["malformed"]
        self._count("malformed args", malformed_kernels)
        kernels = self._kernels(s["kernels"])
        self._count("malformed args", malformed_launches)
        launches = self._launches(s["launches"])
        self._count("malformed args", malformed_ops)
        ops = self._ops(s["ops"], s["python"])
        return {"event_count": s["event_count"], "unread": s["unread"], "dropped": self.dropped,
                **{name: events.without_null_buffers(table) for name, table in
                   (("kernels", kernels), ("launches", launches), ("ops", ops))}}

    def _count(self, reason: str, count: int) -> None:
        if count:
            self.dropped[reason] = self.dropped.get(reason, 0) + count

    # ---- columns

    def _names(self, codes: bytes) -> pl.Series:
        """Names bounded as event_tables._names bounds them, counting the rows cut."""
        if self._names_bounded is None:
            cut = np.fromiter((len(text) > MAX_NAME for text in self.strings), dtype=bool, count=len(self.strings))
            names = [bounded(text) for text in self.strings] if cut.any() else self.strings
            self._names_bounded = pl.Series(names, dtype=pl.String), cut
        names, cut = self._names_bounded
        index = np.frombuffer(codes, np.uint32)
        if cut.any():
            self._count("name cut to the length limit", int(cut[index].sum()))
        return names.gather(pl.Series(index, dtype=pl.UInt32))

    def _mapped(self, codes: bytes, convert: Any, dtype: pl.DataType) -> pl.Series:
        """convert(string) for each row's string, computed once per distinct string used."""
        index = np.frombuffer(codes, np.uint32)
        used = np.flatnonzero(np.bincount(index, minlength=len(self.strings)))  # in one pass, no sort
        lookup = np.zeros(len(self.strings), dtype=np.uint32)
        lookup[used] = np.arange(len(used), dtype=np.uint32)
        values = pl.Series([convert(self.strings[i]) for i in used.tolist()], dtype=dtype)
        return values.gather(pl.Series(lookup[index], dtype=pl.UInt32))

    def _texts(self, codes: bytes, convert: Any = None) -> pl.Series:
        """A nullable string column from codes into the chunk's strings (`convert`: applied to each distinct one)."""
        index = np.frombuffer(codes, np.uint32)
        written = index != _NULL_CODE
        if not written.any():
            return pl.Series([None] * len(index), dtype=pl.String)
        column = self._mapped(np.where(written, index, 0).astype(np.uint32).tobytes(), convert or str, pl.String)
        return column if written.all() else column.set(pl.Series(~written), None)

    def _raws(self, codes: bytes, keep: np.ndarray | None = None) -> pl.Series:
        """Undecoded JSON (shapes, dtypes, scalars) as written; absent, or not kept, is null."""
        index = np.frombuffer(codes, np.uint32)
        present = index != _NULL_CODE
        if keep is not None:
            present &= keep
        raws = pl.Series(self.scanned["raws"], dtype=pl.String).cast(RAW_ARGUMENT)
        if not present.any():
            return pl.Series([None] * len(index), dtype=RAW_ARGUMENT)
        # A null position gathers a null (Series.set on a categorical is not implemented in every Polars the
        # dependency range allows; on the numeric positions it is)
        positions = _nullable(np.where(present, index, 0).astype(np.uint32), present)
        return raws.gather(positions)

    def _ids(self, pair: tuple[bytes, bytes]) -> np.ndarray:
        """Process or thread ids as event_tables.thread_id reads them: (values, valid)."""
        values = np.frombuffer(pair[0], np.int64).copy()
        kind = np.frombuffer(pair[1], np.uint8)
        texts = kind == 2
        if texts.any():
            codes = values[texts]
            distinct = np.unique(codes)
            converted = {int(code): event_tables.thread_id(self.strings[int(code)]) for code in distinct.tolist()}
            values[texts] = [converted[int(code)] for code in codes.tolist()]
        return _nullable(values, kind != 1)

    # ---- tables

    def _common(self, table: dict[str, Any]) -> tuple[pl.Series, np.ndarray, pl.Series]:
        ts = pl.Series("ts_us", np.frombuffer(table["ts"], np.float64), dtype=pl.Float64)
        dur = np.rint(np.frombuffer(table["dur"], np.float64) * 1e3).astype(np.int64)
        return ts, dur, pl.Series(dur, dtype=pl.Int64)

    def _kernels(self, table: dict[str, Any]) -> pl.DataFrame:
        ts, _, dur = self._common(table)
        pid_values, pid_kind = np.frombuffer(table["pid"][0], np.int64), np.frombuffer(table["pid"][1], np.uint8)
        tid_values, tid_kind = np.frombuffer(table["tid"][0], np.int64), np.frombuffer(table["tid"][1], np.uint8)
        columns = {
            "name": self._names(table["name"]),
            "kind": self._mapped(table["cat"], lambda cat: event_records.KERNEL_KINDS[cat.lower()], pl.String),
            # The args' device and stream where written, else the event's pid and tid where they are integers.
            "device": _first(table["device"], (pid_values, pid_kind == 0)),
            "stream": _first(table["stream"], (tid_values, tid_kind == 0)),
            "ts_us": ts,
            "dur_ns": dur,
            "correlation": _series(table["correlation"]),
            "external_id": _first(table["external_id"], _pair(table["external_id_old"])),
        }
        for name in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                     "shared_memory_bytes"):
            columns[name] = _series(table[name])
        occupancy, valid = table["est_occupancy_pct"]
        columns["est_occupancy_pct"] = _nullable(np.frombuffer(occupancy, np.float64), np.frombuffer(valid, bool))
        columns["bytes"] = _series(table["bytes"])
        columns["collective"] = self._texts(table["collective"])
        for name in ("msg_in_elems", "msg_out_elems", "group_size"):
            columns[name] = _series(table[name])
        columns["msg_dtype"] = self._texts(table["msg_dtype"])
        columns["process_group"] = self._texts(table["process_group"])
        return _frame(columns, TRACE_KERNEL_COLUMNS)

    def _launches(self, table: dict[str, Any]) -> pl.DataFrame:
        ts, _, dur = self._common(table)
        return _frame({
            "api": self._names(table["name"]),
            "pid": self._ids(table["pid"]),
            "tid": self._ids(table["tid"]),
            "ts_us": ts,
            "dur_ns": dur,
            "correlation": _series(table["correlation"]),
            "external_id": _first(table["external_id"], _pair(table["external_id_old"])),
            "kernel_name": self._texts(table["kernel_name"], convert=bounded),  # as event_tables.py: not counted
        }, TRACE_LAUNCH_COLUMNS)

    def _ops(self, table: dict[str, Any], python: dict[str, Any]) -> pl.DataFrame:
        """CPU ops and annotations first, then Python frames (no args), as event_tables.op_table orders them."""
        frames = len(python["ts"]) // 8
        names = table["name"] + python["name"]
        keep_concrete = np.fromiter((event_records.keeps_concrete_inputs(text) for text in self.strings), dtype=bool,
                                    count=len(self.strings))[np.frombuffer(table["name"], np.uint32)]
        ts = np.concatenate([np.frombuffer(table["ts"], np.float64), np.frombuffer(python["ts"], np.float64)])
        dur = np.rint(np.concatenate([np.frombuffer(table["dur"], np.float64),
                                      np.frombuffer(python["dur"], np.float64)]) * 1e3).astype(np.int64)
        null_codes = np.full(frames, _NULL_CODE, np.uint32).tobytes()  # the Python frames' args
        return _frame({
            "name": self._names(names),
            "cat": self._mapped(table["cat"] + python["cat"], lambda cat: event_records.OP_CATS[cat.lower()], pl.String),
            "pid": self._ids(_joined(table["pid"], python["pid"])),
            "tid": self._ids(_joined(table["tid"], python["tid"])),
            "ts_us": pl.Series(ts, dtype=pl.Float64),
            "dur_ns": pl.Series(dur, dtype=pl.Int64),
            "external_id": _first(_padded(table["external_id"], frames), _pair(_padded(table["external_id_old"],
                                                                                         frames))),
            "sequence_number": _series(_padded(table["sequence_number"], frames)),
            "input_dims": self._raws(_first_code(table["input_dims"], table["input_dims_old"]) + null_codes),
            "input_types": self._raws(table["input_types"] + null_codes),
            "concrete_inputs": self._raws(table["concrete_inputs"] + null_codes,
                                          np.concatenate([keep_concrete, np.ones(frames, bool)])),
        }, TRACE_OP_COLUMNS)


def _pair(pair: tuple[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(pair[0], np.int64), np.frombuffer(pair[1], bool)


def _nullable(values: np.ndarray, valid: np.ndarray) -> pl.Series:
    series = pl.Series(values)
    return series if valid.all() else series.set(pl.Series(~valid), None)


def _series(pair: tuple[bytes, bytes]) -> pl.Series:
    return _nullable(*_pair(pair))


def _first(pair: tuple[bytes, bytes], fallback: tuple[np.ndarray, np.ndarray]) -> pl.Series:
    """The first column's value where it has one, else the fallback's (event_tables.py: `a if a is not None else b`)."""
    values, valid = _pair(pair)
    other, other_valid = fallback
    return _nullable(np.where(valid, values, other), valid | other_valid)


def _first_code(codes: bytes, fallback: bytes) -> bytes:
    first, second = np.frombuffer(codes, np.uint32), np.frombuffer(fallback, np.uint32)
    return np.where(first != _NULL_CODE, first, second).astype(np.uint32).tobytes()


def _joined(first: tuple[bytes, bytes], second: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    return first[0] + second[0], first[1] + second[1]


def _padded(pair: tuple[bytes, bytes], rows: int) -> tuple[bytes, bytes]:
    """A nullable column followed by `rows` nulls (the Python frames' empty args)."""
    return pair[0] + bytes(8 * rows), pair[1] + bytes(rows)


def _frame(columns: dict[str, pl.Series], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    dtypes = {**schema, "ts_us": pl.Float64}
    order = [name if name != "start_ns" else "ts_us" for name in schema]
    return pl.DataFrame([columns[name].cast(dtypes[name], strict=False).alias(name) for name in order])
