"""Columns of a run's table that hold one value in every row, named in the Parquet file's footer so that reading
the file skips them.

A trace of one GPU leaves a third of the kernels table constant: the collective and nsys-summary columns empty,
rank, device, stream, process and thread one value each. Read as they are, they cost a full column of memory each
(on a 1.5 million-launch run 18 columns, 250 MB, and the page faults of first touching them), and every filter or
sort of the table copies them again. Named in the footer, they are read as constants (Polars keeps a literal column
as one value, whatever the table's height). The file itself keeps every column with every value, so DuckDB, Arrow
and `kernelscope query` read it as before; the footer also holds the row count, and a file whose row count no
longer matches (rewritten by another tool) is read whole.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

CONSTANTS_KEY = "kernelscope.constant_columns"  # JSON: column → its one value (null for an empty column)
ROWS_KEY = "kernelscope.rows"


def constant_columns(table: pl.DataFrame) -> dict[str, Any]:
    """The columns (all but the first, which keeps the row count when the rest are skipped) that are entirely
    null, or numeric with one finite value and no null."""
    if table.height < 2:
        return {}
    constants: dict[str, Any] = {}
    for column in table.columns[1:]:
        series = table[column]
        if series.null_count() == series.len():
            constants[column] = None
        elif series.dtype.is_numeric() and not series.null_count():
            low, high = series.min(), series.max()
            if low == high and isinstance(low, int | float) and math.isfinite(low):
                constants[column] = low
    return constants


def footer_metadata(table: pl.DataFrame) -> dict[str, str]:
    """The key-value metadata to write with `table`."""
    constants = constant_columns(table)
    if not constants:
        return {}
    return {CONSTANTS_KEY: json.dumps(constants), ROWS_KEY: str(table.height)}


def read_skipping_constants(path: Path) -> pl.DataFrame | None:
    """The table in `path` with its constant columns made from the footer rather than read; None when the footer
    names none (a file written before, or by another tool), or no longer describes the file."""
    metadata = pl.read_parquet_metadata(path)
    if CONSTANTS_KEY not in metadata:
        return None
    try:
        constants = json.loads(metadata[CONSTANTS_KEY])
        rows = int(metadata.get(ROWS_KEY, "-1"))
    except ValueError:
        return None
    schema = pl.read_parquet_schema(path)
    if not _describes(constants, schema):
        return None
    read = [column for column in schema if column not in constants]
    table = pl.read_parquet(path, columns=read)
    if table.height != rows:
        return None
    return table.select(pl.lit(constants[column], dtype=dtype).alias(column) if column in constants
                        else pl.col(column) for column, dtype in schema.items())


def _describes(constants: object, schema: dict[str, pl.DataType]) -> bool:
    """Whether a footer's constants are what footer_metadata writes for a file of this schema: columns of the file
    but its first, each with null or a finite number (anything else: the file is read whole)."""
    if not isinstance(constants, dict) or not set(constants) <= set(list(schema)[1:]):
        return False
    return all(value is None or (isinstance(value, int | float) and not isinstance(value, bool)
                                 and math.isfinite(value) and schema[column].is_numeric())
               for column, value in constants.items())
