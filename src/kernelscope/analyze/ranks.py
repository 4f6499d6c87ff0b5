"""Several ranks (one trace file or process each) in one run. Ids inside a trace (ops, kernels) restart in every
file: combining ranks shifts them so that every id is unique in the run, and nothing joined on an id can meet a
row of another rank. The `rank` column says where each row came from."""

from __future__ import annotations

import polars as pl

_OP_REFERENCES = ("op_id", "top_op_id", "cost_op_id")
_TIMES = ("start_ns", "launch_start_ns")


def rank_clock_offsets(origins_us: list[float], base_times_ns: list[int | None]) -> list[int]:
    """Each rank's time origin after the earliest rank's, in ns. A trace's times are its own timestamps (µs,
    counted from `origin_us`) plus its baseTimeNanoseconds where it writes one (the same clock on every rank of one
    host; torch's epoch offset across hosts)."""
    bases = [base if isinstance(base, int) else 0 for base in base_times_ns]
    # Differences first: an absolute time in ns (~1e18) in a float loses hundreds of ns.
    relative = [(origin - origins_us[0]) * 1e3 + (base - bases[0]) for origin, base in
                zip(origins_us, bases, strict=True)]
    first = min(relative)
    return [round(r - first) for r in relative]


def combine_ranks(parts: list[tuple[pl.DataFrame, pl.DataFrame]],
                  clock_offsets_ns: list[int] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kernels, ops) of each rank, attributed on their own → one (kernels, ops) with a rank column and op ids
    (op_id, parent_op_id, and the kernels' op_id, top_op_id, cost_op_id) made unique across ranks; kernel_id
    numbers the kernels of all ranks in order. clock_offsets_ns: how far each rank's time origin lies after the
    run's (see rank_clock_offsets); its times are moved onto the run's clock, so that ranks can be compared."""
    kernels_parts, ops_parts = [], []
    offset = 0
    offsets = clock_offsets_ns or [0] * len(parts)
    for rank, (kernels, ops) in enumerate(parts):
        shift = pl.lit(offset, dtype=pl.Int64)
        clock = pl.lit(offsets[rank], dtype=pl.Int64)
        kernels_parts.append(kernels.with_columns(
            pl.lit(rank, dtype=pl.Int64).alias("rank"),
            *((pl.col(c) + shift).alias(c) for c in _OP_REFERENCES if c in kernels.columns),
            *((pl.col(c) + clock).alias(c) for c in _TIMES if c in kernels.columns)))
        ops_parts.append(ops.with_columns(
            pl.lit(rank, dtype=pl.Int64).alias("rank"),
            (pl.col("op_id") + shift).alias("op_id"), (pl.col("parent_op_id") + shift).alias("parent_op_id"),
            (pl.col("start_ns") + clock).alias("start_ns")))
        offset += int(ops["op_id"].max()) + 1 if ops.height else 0
    kernels = pl.concat(kernels_parts, how="diagonal_relaxed")
    kernels = kernels.with_columns(pl.int_range(kernels.height, dtype=pl.Int64).alias("kernel_id"))
    return kernels, pl.concat(ops_parts, how="diagonal_relaxed")
