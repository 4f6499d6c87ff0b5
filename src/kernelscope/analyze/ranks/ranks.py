"""Several ranks (one trace file or process each) in one run. Ids inside a trace (ops, kernels) restart in every
file: combining ranks shifts them so that every id is unique in the run, and nothing joined on an id can meet a
row of another rank. The `rank` column says where each row came from."""

from __future__ import annotations

import polars as pl

_OP_REFERENCES = ("op_id", "top_op_id", "cost_op_id")
_TIMES = ("start_ns", "launch_start_ns")


def rank_count(kernels: pl.DataFrame) -> int:
    """How many ranks the rows come from (1 for a run of one process)."""
    if "rank" not in kernels.columns or kernels.height == 0:
        return 1
    return max(1, kernels["rank"].drop_nulls().n_unique())


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


def trace_ranks(distributed_infos: list) -> list[int]:
    """Each file's rank: the one its trace records (torch's distributedInfo.rank) where every file records a
    different one, else the files' order."""
    ranks = [info.get("rank") if isinstance(info, dict) else None for info in distributed_infos]
    if all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks) and len(set(ranks)) == len(ranks):
        return ranks
    return list(range(len(distributed_infos)))


def combine_ranks(parts: list[tuple[pl.DataFrame, pl.DataFrame]],
                  clock_offsets_ns: list[int] | None = None,
                  ranks: list[int] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kernels, ops) of each rank, attributed on their own → one (kernels, ops) with a rank column and op ids
    (op_id, parent_op_id, and the kernels' op_id, top_op_id, cost_op_id) made unique across ranks; kernel_id
    numbers the kernels of all ranks in order. clock_offsets_ns: how far each rank's time origin lies after the
    run's (see rank_clock_offsets); its times are moved onto the run's clock, so that ranks can be compared.
    ranks: each part's rank number (default: its position)."""
    kernels_parts, ops_parts = [], []
    offset = 0
    offsets = clock_offsets_ns or [0] * len(parts)
    # A part may hold several ranks already (the processes of one Nsight Systems export, numbered from 0): they keep
    # their numbers after those of the parts before them.
    inner = [int(k["rank"].max() or 0) + 1 if "rank" in k.columns and k.height else 1 for k, _ in parts]
    numbers = ranks or [sum(inner[:i]) for i in range(len(parts))]
    for index, (kernels, ops) in enumerate(parts):
        rank = numbers[index]
        shift = pl.lit(offset, dtype=pl.Int64)
        clock = pl.lit(offsets[index], dtype=pl.Int64)
        own = (pl.col("rank").fill_null(0) if "rank" in kernels.columns else pl.lit(0)) + rank
        kernels_parts.append(kernels.with_columns(
            own.cast(pl.Int64).alias("rank"),
            *((pl.col(c) + shift).alias(c) for c in _OP_REFERENCES if c in kernels.columns),
            *((pl.col(c) + clock).alias(c) for c in _TIMES if c in kernels.columns)))
        ops_parts.append(ops.with_columns(
            ((pl.col("rank").fill_null(0) if "rank" in ops.columns else pl.lit(0)) + rank).cast(pl.Int64).alias("rank"),
            (pl.col("op_id") + shift).alias("op_id"), (pl.col("parent_op_id") + shift).alias("parent_op_id"),
            (pl.col("start_ns") + clock).alias("start_ns")))
        offset += int(ops["op_id"].max()) + 1 if ops.height else 0
    kernels = pl.concat(kernels_parts, how="diagonal_relaxed")
    kernels = kernels.with_columns(pl.int_range(kernels.height, dtype=pl.Int64).alias("kernel_id"))
    return kernels, pl.concat(ops_parts, how="diagonal_relaxed")


def combine_calls(parts: list[pl.DataFrame | None], clock_offsets_ns: list[int] | None = None,
                  ranks: list[int] | None = None) -> pl.DataFrame | None:
    """Each rank's calls (analyze/ranks/host_calls) → one table with a rank column, on the run's clock as combine_ranks
    puts the kernels. None when a part has none (a source without calls)."""
    if not parts or any(part is None for part in parts):
        return None
    offsets = clock_offsets_ns or [0] * len(parts)
    # A part may hold several ranks already (the processes of one recording): numbered on as combine_ranks does.
    inner = [int(part["rank"].max() or 0) + 1 if "rank" in part.columns and part.height else 1 for part in parts]
    numbers = ranks or [sum(inner[:i]) for i in range(len(parts))]

    def own(part: pl.DataFrame) -> pl.Expr:
        return pl.col("rank").fill_null(0) if "rank" in part.columns else pl.lit(0, dtype=pl.Int64)

    return pl.concat([part.with_columns((own(part) + numbers[i]).cast(pl.Int64).alias("rank"),
                                        pl.col("start_ns") + pl.lit(offsets[i], dtype=pl.Int64))
                      for i, part in enumerate(parts) if part is not None], how="diagonal_relaxed")


def rank_table(kernels: pl.DataFrame, timed: list | None = None) -> pl.DataFrame | None:
    """Per rank of a run of several ranks: launches, device time, the share attributed to a phase and a module,
    and (profile --gpus runs) where it ran and its timings without the profiler (run.json parallel.ranks).
    None for a run of one rank."""
    if "rank" not in kernels.columns or kernels["rank"].n_unique() < 2:
        return None
    from kernelscope import ranges

    known = (pl.col("phase") != ranges.UNKNOWN) & pl.col("module").is_not_null()
    table = kernels.group_by("rank").agg(
        pl.col("instances").fill_null(1).sum().alias("kernel_count"),
        pl.col("dur_ns").sum().alias("device_time_ns"),
        (100.0 * pl.col("dur_ns").filter(known).sum() / pl.col("dur_ns").sum()).alias("attributed_pct"),
    ).sort("rank")
    if timed:
        rows = [(r.rank, r.host, r.device, r.timings.ttft_ms, r.timings.tpot_ms) for r in timed]
        where = pl.DataFrame(rows, schema={"rank": pl.Int64, "host": pl.String, "device": pl.String,
                                           "ttft_ms": pl.Float64, "tpot_ms": pl.Float64}, orient="row")
        table = table.join(where, on="rank", how="left")
    return table


def with_waiting(ranks: pl.DataFrame | None, instances: pl.DataFrame | None) -> pl.DataFrame | None:
    """The rank table with each rank's device time less the time it waited inside collectives for the other ranks
    (`working_ns`: its own work, where collectives were matched across the ranks; analyze/ranks/communication)."""
    if ranks is None or instances is None or instances.height == 0:
        return ranks
    waited = instances.group_by("rank").agg(pl.col("wait_ns").sum().alias("_waited"))
    return (ranks.join(waited, on="rank", how="left")
            .with_columns((pl.col("device_time_ns") - pl.col("_waited").fill_null(0)).alias("working_ns"))
            .drop("_waited"))
