"""Several ranks (one trace file or process each) in one run. Ids inside a trace (ops, kernels) restart in every
file: combining ranks shifts them so that every id is unique in the run, and nothing joined on an id can meet a
row of another rank. The `rank` column says where each row came from."""

from __future__ import annotations

import polars as pl

_OP_REFERENCES = ("op_id", "top_op_id", "cost_op_id")


def combine_ranks(parts: list[tuple[pl.DataFrame, pl.DataFrame]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kernels, ops) of each rank, attributed on their own → one (kernels, ops) with a rank column and op ids
    (op_id, parent_op_id, and the kernels' op_id, top_op_id, cost_op_id) made unique across ranks; kernel_id
    numbers the kernels of all ranks in order."""
    kernels_parts, ops_parts = [], []
    offset = 0
    for rank, (kernels, ops) in enumerate(parts):
        shift = pl.lit(offset, dtype=pl.Int64)
        kernels_parts.append(kernels.with_columns(
            pl.lit(rank, dtype=pl.Int64).alias("rank"),
            *((pl.col(c) + shift).alias(c) for c in _OP_REFERENCES if c in kernels.columns)))
        ops_parts.append(ops.with_columns(
            pl.lit(rank, dtype=pl.Int64).alias("rank"),
            (pl.col("op_id") + shift).alias("op_id"), (pl.col("parent_op_id") + shift).alias("parent_op_id")))
        offset += int(ops["op_id"].max()) + 1 if ops.height else 0
    kernels = pl.concat(kernels_parts, how="diagonal_relaxed")
    kernels = kernels.with_columns(pl.int_range(kernels.height, dtype=pl.Int64).alias("kernel_id"))
    return kernels, pl.concat(ops_parts, how="diagonal_relaxed")
