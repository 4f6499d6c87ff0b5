"""The runtime and driver calls of a trace that started no device work: what the kernels table cannot hold
(each kernel keeps its own launch call) and the dependency graph needs, synchronisations (stream, event, device)
and event records and waits above all (docs/run-format.md, calls.parquet)."""

from __future__ import annotations

import polars as pl

from kernelscope.contracts.tables import CALL_COLUMNS, conform_calls


def host_calls(launches: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Rows of a trace's launches table (contracts.tables.TRACE_LAUNCH_COLUMNS) whose correlation id no device row
    of `kernels` carries, in start order, with the columns of calls.parquet (rank 0: the caller sets it)."""
    if launches.height == 0:
        return pl.DataFrame(schema=CALL_COLUMNS)
    launched = kernels.select(pl.col("correlation").drop_nulls().unique())
    idle = launches.join(launched, on="correlation", how="anti")
    return conform_calls(idle.select([c for c in CALL_COLUMNS if c in idle.columns]).sort("start_ns"))
