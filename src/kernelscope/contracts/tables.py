"""The columns of the tables that travel between stages as Polars dtypes (contracts/table_columns.py lists them;
docs/run-format.md describes each column). `conform_kernels` / `conform_ops` give a table every column of its
schema with the schema's dtype (missing ones null; `instances` 1, `rank` 0, `phase` unknown), so analysis never
asks whether a column is there. Columns beyond the schema are kept after it.
"""

from __future__ import annotations

import polars as pl

from kernelscope.contracts import table_columns as _names
from kernelscope.contracts.table_columns import (  # noqa: F401  (read elsewhere as tables.RANK, …)
    COST_SOURCES,
    CPU_OP,
    INSTANCES,
    RANK,
    UNKNOWN_PHASE,
)


def _dtypes(columns: dict[str, str]) -> dict[str, pl.DataType]:
    """A table's columns (contracts/table_columns.py) as Polars dtypes."""
    return {name: getattr(pl, kind)() for name, kind in columns.items()}


RAW_ARGUMENT = getattr(pl, _names.RAW_ARGUMENT)()
TRACE_KERNEL_COLUMNS = _dtypes(_names.TRACE_KERNEL_COLUMNS)
TRACE_LAUNCH_COLUMNS = _dtypes(_names.TRACE_LAUNCH_COLUMNS)
TRACE_OP_COLUMNS = _dtypes(_names.TRACE_OP_COLUMNS)
ATTRIBUTION_COLUMNS = _dtypes(_names.ATTRIBUTION_COLUMNS)
SUMMARY_COLUMNS = _dtypes(_names.SUMMARY_COLUMNS)
COST_COLUMNS = _dtypes(_names.COST_COLUMNS)
CATALOG_COLUMNS = _dtypes(_names.CATALOG_COLUMNS)
KERNEL_COLUMNS = _dtypes(_names.KERNEL_COLUMNS)
OP_COLUMNS = _dtypes(_names.OP_COLUMNS)
CALL_COLUMNS = _dtypes(_names.CALL_COLUMNS)
PATH_SEGMENT_COLUMNS = _dtypes(_names.PATH_SEGMENT_COLUMNS)

_DEFAULTS = {INSTANCES: 1, RANK: 0, "phase": UNKNOWN_PHASE}


def conform(table: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """`table` with every column of `columns` in that order and dtype (missing ones filled with their default or
    null), then any other columns it has; in one chunk per column (Polars' eager group_by and join copy every
    column of a frame in several chunks into one, on every call: a copy of the whole table each time)."""
    if _conforms(table, columns):
        return table  # a run read back, or conformed before: nothing to cast, fill or gather
    present = set(table.columns)
    exprs = []
    for name, dtype in columns.items():
        default = _DEFAULTS.get(name)
        column = pl.col(name).cast(dtype) if name in present else pl.lit(None, dtype=dtype)
        exprs.append(column.fill_null(default).alias(name) if default is not None else column.alias(name))
    extra = [name for name in table.columns if name not in columns]
    return table.select(*exprs, *extra).rechunk()


def _conforms(table: pl.DataFrame, columns: dict[str, pl.DataType]) -> bool:
    """Whether conform would return `table` as it is: `columns` first, in order and type, defaulted columns without
    nulls, every column in one chunk."""
    schema = list(table.schema.items())
    if schema[: len(columns)] != list(columns.items()):
        return False
    if any(table[name].null_count() for name in _DEFAULTS if name in columns):
        return False
    return all(count <= 1 for count in table.n_chunks("all"))


def costs_stored(kernels: pl.DataFrame) -> bool:
    """Whether a kernels table carries its analytic costs (runs kernelscope writes do); one without any is costed
    from its ops table (analyze/costs/kernel_costs). Columns the table lacks count as empty."""
    if kernels.height == 0:
        return True
    return any(c in kernels.columns and not kernels[c].is_null().all() for c in ("flops", "cost_model"))


def conform_kernels(kernels: pl.DataFrame) -> pl.DataFrame:
    return conform(kernels, KERNEL_COLUMNS)


def conform_ops(ops: pl.DataFrame) -> pl.DataFrame:
    return conform(ops, OP_COLUMNS)


def conform_calls(calls: pl.DataFrame) -> pl.DataFrame:
    return conform(calls, CALL_COLUMNS)


def empty_trace_tables() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Kernels, launches and ops with no rows."""
    return (pl.DataFrame(schema=TRACE_KERNEL_COLUMNS), pl.DataFrame(schema=TRACE_LAUNCH_COLUMNS),
            pl.DataFrame(schema=TRACE_OP_COLUMNS))
