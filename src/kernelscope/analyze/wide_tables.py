"""Work on the wide kernels and ops tables that touches only the columns it needs: a join or a filter of the whole
table would copy every column (tens of them, hundreds of MB on a 2 GB trace)."""

from __future__ import annotations

import polars as pl


def beside(table: pl.DataFrame, other: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """A left join on keys unique in `other`, without copying `table`: only the key columns are joined, and the
    columns found are set beside the table's own, in the table's row order."""
    found = table.select(on).join(other, on=on, how="left", maintain_order="left", nulls_equal=False)
    return table.with_columns(found.drop(on).get_columns())


def time_where(kernels: pl.DataFrame, condition: pl.Expr) -> int:
    """Device time (dur_ns summed) of the rows where `condition` holds (null counts as not holding)."""
    return int(kernels.select(pl.col("dur_ns").filter(condition).sum()).item() or 0)


def text_columns(table: pl.DataFrame, columns: list[str]) -> list[str]:
    """Those of `columns` that hold text: the keys to group by as codes (as_codes)."""
    return [column for column in columns if table.schema[column] == pl.String]


def as_codes(*columns: str) -> list[pl.Expr]:
    """Text columns as category codes, to group by: Polars hashes a text key in full on every group-by and window,
    and kernel names run to hundreds of characters; as codes they are hashed once, when cast. `as_text` turns them
    back before a table is sorted or handed on."""
    return [pl.col(column).cast(pl.Categorical) for column in columns]


def as_text(*columns: str) -> list[pl.Expr]:
    return [pl.col(column).cast(pl.String) for column in columns]
