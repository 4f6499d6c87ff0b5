"""Per-kernel statistics in the shape of `nsys stats` cuda_gpu_kern_sum.

Rows are single launches (traces) or summaries of several (`instances` > 1, imported from nsys stats, with their
own min/max/median/stddev). A kernel's statistics combine both: instances and total add up, the average is total
over instances, min and max are taken over the rows' own min and max. The median and the standard deviation come
from the launches when every row is one launch; from the row itself when the kernel has exactly one summary row;
the standard deviation of several summary rows is pooled (exact for sample standard deviations). A statistic a
summary does not give (a reduced table without Min/Max/Med/StdDev) stays null."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.launch_counts import launches
from kernelscope.analyze.wide_tables import as_codes, as_text, text_columns
from kernelscope.contracts.tables import INSTANCES

STAT_COLUMNS = ["time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]
# What kernel_summary reads of a kernels table besides its `by` keys: select these before filtering a wide table.
SUMMARY_INPUT_COLUMNS = ("name", "dur_ns", "kind", "min_ns", "max_ns", "med_ns", "stddev_ns", INSTANCES)


def kernel_summary(kernels: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """One row per kernel name (within each `by` group), sorted by total time; time_pct is the share of
    the group's device time. stddev is the sample standard deviation (0 for one instance)."""
    by = by or []
    keys = [*by, "name"]
    # Only the columns read; text keys as category codes (a window and a group-by per row hashed long kernel names
    # twice: most of this table's time on big runs).
    read = [*by, *SUMMARY_INPUT_COLUMNS]
    text = text_columns(kernels, keys)
    k = kernels.select(c for c in dict.fromkeys(read) if c in kernels.columns).with_columns(as_codes(*text))
    stats = _from_launches(k, keys) if _one_launch_per_row(k) else _from_rows(k, keys)
    total = pl.col("total_ns").sum().over(by) if by else pl.col("total_ns").sum()
    stats = stats.with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"), *as_text(*text))
    return stats.sort([*by, "total_ns", "name"], descending=[False] * len(by) + [True, False]).select(
        *by, "name", "kind", *STAT_COLUMNS
    )


def _one_launch_per_row(kernels: pl.DataFrame) -> bool:
    """Every row is one launch (any trace): no summary row to combine."""
    if INSTANCES not in kernels.columns:
        return True
    counts = kernels[INSTANCES]  # null counts as one launch; min and max make no column to check every row
    return counts.null_count() == counts.len() or (counts.min() == 1 and counts.max() == 1)


def _from_launches(k: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The statistics of rows that are single launches: straight from their durations (what _from_rows gives
    for them, without its per-row columns, a window over every launch: a third of this table's time on a run of
    1.5 million launches)."""
    dur = pl.col("dur_ns")
    return k.group_by(keys).agg(
        dur.sum().alias("total_ns"),
        pl.len().cast(pl.Int64).alias("instances"),
        dur.mean().alias("avg_ns"),
        dur.median().alias("med_ns"),
        dur.min().cast(pl.Float64).alias("min_ns"),
        dur.max().cast(pl.Float64).alias("max_ns"),
        dur.std(ddof=1).fill_null(0.0).alias("stddev_ns"),
        pl.col("kind").first().alias("kind"),
    )


def _from_rows(k: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The statistics of rows of which some summarise several launches (nsys stats imports)."""
    dur = pl.col("dur_ns")
    n = launches()
    single = n == 1
    # Each row's statistics: its own (summary rows), or its duration (a single launch).
    k = k.with_columns(
        n.alias("_n"),
        pl.coalesce(pl.col("min_ns"), pl.when(single).then(dur.cast(pl.Float64))).alias("_min"),
        pl.coalesce(pl.col("max_ns"), pl.when(single).then(dur.cast(pl.Float64))).alias("_max"),
        pl.coalesce(pl.col("med_ns"), pl.when(single).then(dur.cast(pl.Float64))).alias("_med"),
        pl.coalesce(pl.col("stddev_ns"), pl.when(single).then(pl.lit(0.0))).alias("_std"),
    )
    # Pooled variance: within-row sums of squares plus each row's mean against the kernel's mean.
    mean_all = dur.sum().over(keys) / pl.col("_n").sum().over(keys)
    k = k.with_columns(
        ((pl.col("_n") - 1) * pl.col("_std") ** 2 + pl.col("_n") * (dur / pl.col("_n") - mean_all) ** 2)
        .alias("_sq"),
    )
    stats = k.group_by(keys).agg(
        dur.sum().alias("total_ns"),
        pl.col("_n").sum().alias("instances"),
        pl.len().alias("_rows"),
        (pl.col("_n") == 1).all().alias("_single"),
        dur.mean().alias("_mean"),
        dur.median().alias("_median"),
        dur.min().cast(pl.Float64).alias("_min_dur"),
        dur.max().cast(pl.Float64).alias("_max_dur"),
        dur.std(ddof=1).fill_null(0.0).alias("_std_dur"),
        pl.col("_min").min(), pl.col("_min").is_null().any().alias("_min_missing"),
        pl.col("_max").max(), pl.col("_max").is_null().any().alias("_max_missing"),
        pl.col("_med").first(), pl.col("_std").first().alias("_std_first"),
        pl.col("_sq").sum(), pl.col("_std").is_null().any().alias("_std_missing"),
        pl.col("kind").first().alias("kind"),
    )
    single_rows, one_row = pl.col("_single"), pl.col("_rows") == 1
    pooled = (pl.col("_sq") / (pl.col("instances") - 1)).sqrt()
    return stats.with_columns(
        pl.when(single_rows).then(pl.col("_mean")).otherwise(pl.col("total_ns") / pl.col("instances"))
        .alias("avg_ns"),
        pl.when(single_rows).then(pl.col("_median")).when(one_row).then(pl.col("_med")).alias("med_ns"),
        pl.when(single_rows).then(pl.col("_min_dur")).when(~pl.col("_min_missing")).then(pl.col("_min"))
        .alias("min_ns"),
        pl.when(single_rows).then(pl.col("_max_dur")).when(~pl.col("_max_missing")).then(pl.col("_max"))
        .alias("max_ns"),
        pl.when(single_rows).then(pl.col("_std_dur")).when(one_row).then(pl.col("_std_first"))
        .when(~pl.col("_std_missing")).then(pooled).alias("stddev_ns"),
    )
