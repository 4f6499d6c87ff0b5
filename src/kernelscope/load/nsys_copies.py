"""Memory copies and sets of an Nsight Systems SQLite export, named as Kineto names them: `Memcpy HtoD (Pageable ->
Device)`, `Memset (Device)`. The copy direction and the memory kinds are numbers, named by the export's
ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND tables; exports of nsys 2020–2022.2 have no such tables and use the
same numbering, which data/nsys_enums.toml holds (docs/nsys.md says how that was checked)."""

from __future__ import annotations

import re
import sqlite3

import polars as pl

from kernelscope.load import knowledge
from kernelscope.load.nsys_schema import DEVICE_WORK, Schema, device_work, fetch, quote

MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
MEMCPY_ENUM = "ENUM_CUDA_MEMCPY_OPER"
MEMORY_ENUM = "ENUM_CUDA_MEM_KIND"
_BUILT_IN = {MEMCPY_ENUM: "memcpy_kinds", MEMORY_ENUM: "memory_kinds"}


def enum_labels(conn: sqlite3.Connection, schema: Schema, table: str) -> tuple[list[int], list[str], list[str]]:
    """ids, symbol names and human labels of an ENUM_* table; nsys's own numbering where the export has no table."""
    if not schema.has(table):
        known = knowledge.nsys_enums()[_BUILT_IN[table]]
        return [int(k) for k in known], [v[0] for v in known.values()], [v[1] for v in known.values()]
    name, label = schema.column(table, "name", "label"), schema.column(table, "label", "name")
    if not schema.column(table, "id") or not name:
        return [], [], []
    rows = conn.execute(f"SELECT id, {quote(name)}, {quote(label)} FROM {quote(table)}").fetchall()
    return [r[0] for r in rows], [r[1] or "" for r in rows], [r[2] or r[1] or "" for r in rows]


def _copy_direction(symbol: str, label: str) -> str:
    """CUDA_MEMCPY_KIND_HTOD → HtoD (Kineto's spelling); other kinds keep nsys's label."""
    match = re.fullmatch(r"(?:CUDA_MEMCPY_KIND_)?([A-Z])TO([A-Z])", symbol)
    return f"{match.group(1)}to{match.group(2)}" if match else (label or symbol)


def _lookup(column: str, keys: list[int], values: list[str]) -> pl.Expr:
    if not keys:
        return pl.lit(None, dtype=pl.String)
    return pl.col(column).replace_strict(keys, values, default=None, return_dtype=pl.String)


def memcpys(conn: sqlite3.Connection, schema: Schema) -> pl.DataFrame:
    if not schema.has(MEMCPY_TABLE):
        return pl.DataFrame()
    raw = fetch(conn, schema, MEMCPY_TABLE, {**DEVICE_WORK, "bytes": ("bytes",), "copy_kind": ("copyKind",),
                                             "src_kind": ("srcKind",), "dst_kind": ("dstKind",)})
    ids, symbols, labels = enum_labels(conn, schema, MEMCPY_ENUM)
    directions = [_copy_direction(s, lbl) for s, lbl in zip(symbols, labels, strict=True)]
    mem_ids, _, mem_labels = enum_labels(conn, schema, MEMORY_ENUM)
    direction = _lookup("copy_kind", ids, directions)
    src, dst = _lookup("src_kind", mem_ids, mem_labels), _lookup("dst_kind", mem_ids, mem_labels)
    name = (
        pl.when(direction.is_null()).then(pl.format("Memcpy {}", pl.col("copy_kind").cast(pl.String)))
        .when(src.is_not_null() & dst.is_not_null()).then(pl.format("Memcpy {} ({} -> {})", direction, src, dst))
        .otherwise(pl.format("Memcpy {}", direction))
    )
    return raw.select(*device_work(name, "memcpy"), "bytes")


def memsets(conn: sqlite3.Connection, schema: Schema) -> pl.DataFrame:
    if not schema.has(MEMSET_TABLE):
        return pl.DataFrame()
    raw = fetch(conn, schema, MEMSET_TABLE, {**DEVICE_WORK, "bytes": ("bytes",), "mem_kind": ("memKind",)})
    mem_ids, _, mem_labels = enum_labels(conn, schema, MEMORY_ENUM)
    kind = _lookup("mem_kind", mem_ids, mem_labels)
    name = pl.when(kind.is_null()).then(pl.lit("Memset")).otherwise(pl.format("Memset ({})", kind))
    return raw.select(*device_work(name, "memset"), "bytes")
