"""Joins that add columns to a wide table without copying it."""

from __future__ import annotations

import polars as pl


def beside(table: pl.DataFrame, other: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """A left join on keys unique in `other`, without copying `table`: only the key columns are joined, and the
    columns found are set beside the table's own, in the table's row order (a full join would gather every
    column of a wide table: on a 2 GB trace, hundreds of MB at the peak)."""
    found = table.select(on).join(other, on=on, how="left", maintain_order="left", nulls_equal=False)
    return table.with_columns(found.drop(on).get_columns())
