"""Reading an Nsight Systems SQLite export as it is: its tables and columns (which vary between nsys versions), rows
fetched in batches straight into typed columnar frames, ids resolved against StringIds, and the process and thread
ids packed into globalTid / globalPid (load/nsys_sqlite.py, docs/nsys.md)."""

from __future__ import annotations

import sqlite3
from typing import Any

import polars as pl

ID_BITS = 24  # globalTid: pid = (globalTid >> 24) & 0xFFFFFF, tid = globalTid & 0xFFFFFF
_BATCH_ROWS = 1 << 18


class Schema:
    """Table name → its column names, as this export has them."""

    def __init__(self, tables: dict[str, list[str]]):
        self.tables = tables

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> Schema:
        names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return cls({name: [row[1] for row in conn.execute(f"PRAGMA table_info({quote(name)})")] for name in names})

    def has(self, table: str) -> bool:
        return table in self.tables

    def column(self, table: str, *candidates: str) -> str | None:
        """The first of the candidate columns this table has."""
        columns = self.tables.get(table, [])
        return next((c for c in candidates if c in columns), None)


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class BadValues(Exception):
    """A column holds values of another type than the schema documents (e.g. text in an integer column)."""


# A column to read: the first present of some candidate column names (none present: null), or an SQL expression.
Source = tuple[str, ...] | str


def fetch(conn: sqlite3.Connection, schema: Schema, table: str, columns: dict[str, Source],
          types: dict[str, Any] | None = None, where: str = "") -> pl.DataFrame:
    """Read columns (alias → source) of a table into a typed frame (Int64 unless types says otherwise)."""
    exprs = []
    for alias, source in columns.items():
        if isinstance(source, str):
            exprs.append(f"{source} AS {alias}")
        else:
            found = schema.column(table, *source)
            exprs.append(f"{quote(found) if found else 'NULL'} AS {alias}")
    sql = f"SELECT {', '.join(exprs)} FROM {quote(table)}" + (f" WHERE {where}" if where else "")
    return _read(conn, sql, table, {alias: (types or {}).get(alias, pl.Int64) for alias in columns})


def _read(conn: sqlite3.Connection, sql: str, table: str, schema: dict[str, Any]) -> pl.DataFrame:
    """Run a query; rows go into typed columnar frames batch by batch (memory bounded by the batch)."""
    cursor = conn.execute(sql)
    parts = []
    while rows := cursor.fetchmany(_BATCH_ROWS):
        try:
            parts.append(pl.DataFrame(rows, schema=schema, orient="row"))
        except (pl.exceptions.PolarsError, TypeError, OverflowError) as exc:
            raise BadValues(f"unexpected values in {table}: {str(exc).splitlines()[0]}") from None
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


def resolve(strings: pl.DataFrame, column: str) -> pl.Expr:
    """String of an id column via StringIds (null where the id is null or unknown)."""
    return pl.col(column).replace_strict(strings["id"], strings["value"], default=None, return_dtype=pl.String)


def pid(column: str) -> pl.Expr:
    return ((pl.col(column) // (1 << ID_BITS)) % (1 << ID_BITS)).cast(pl.Int64)


def tid(column: str) -> pl.Expr:
    return (pl.col(column) % (1 << ID_BITS)).cast(pl.Int64)


TIMES: dict[str, Source] = {"start": ("start",), "end_": ("end",)}
DEVICE_WORK: dict[str, Source] = {
    **TIMES, "device": ("deviceId",), "stream": ("streamId",), "correlation": ("correlationId",),
    "global_pid": ("globalPid",),
}


def device_work(name: pl.Expr, kind: str) -> list[pl.Expr]:
    """The columns every kernel, copy and set has, from a frame read with DEVICE_WORK's columns."""
    return [name.alias("name"), pl.lit(kind).alias("kind"), pl.col("device"), pl.col("stream"), pl.col("start"),
            (pl.col("end_") - pl.col("start")).alias("dur_ns"), pl.col("correlation"),
            pid("global_pid").alias("pid")]
