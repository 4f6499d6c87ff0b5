"""The run format's columns of each table view of a dataset as DuckDB types (docs/dataset.md), from the column
lists of contracts/table_columns.py, without loading Polars."""

from __future__ import annotations

from kernelscope.contracts.table_columns import (
    INSTANCES,
    KERNEL_COLUMNS,
    OP_COLUMNS,
    PATH_SEGMENT_COLUMNS,
    RANK,
    UNKNOWN_PHASE,
)

# Polars dtype name → DuckDB type; any other (categories) is text.
_DUCK_TYPES = {"Int64": "BIGINT", "Float64": "DOUBLE", "String": "VARCHAR", "Boolean": "BOOLEAN"}


def _duck(columns: dict[str, str]) -> dict[str, str]:
    return {name: _DUCK_TYPES.get(kind, "VARCHAR") for name, kind in columns.items()}


VIEW_SCHEMAS = {"kernels": _duck(KERNEL_COLUMNS), "ops": _duck(OP_COLUMNS), "ncu": {},
                "critical_path": _duck(PATH_SEGMENT_COLUMNS)}
# What a run format column missing from a run's table holds (contracts.tables.conform fills the same).
VIEW_DEFAULTS = {INSTANCES: "1", RANK: "0", "phase": f"'{UNKNOWN_PHASE}'"}
