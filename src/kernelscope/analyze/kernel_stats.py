"""Per-kernel statistics in the shape of `nsys stats` cuda_gpu_kern_sum."""

from __future__ import annotations

import polars as pl

STAT_COLUMNS = ["time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]


def kernel_summary(kernels: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """One row per kernel name (within each `by` group), sorted by total time; time_pct is the share of
    the group's device time. stddev is the sample standard deviation (0 for one instance)."""
    by = by or []
    keys = [*by, "name"]
    stats = kernels.group_by(keys).agg(
        pl.col("dur_ns").sum().alias("total_ns"),
        pl.len().alias("instances"),
        pl.col("dur_ns").mean().alias("avg_ns"),
        pl.col("dur_ns").median().alias("med_ns"),
        pl.col("dur_ns").min().alias("min_ns"),
        pl.col("dur_ns").max().alias("max_ns"),
        pl.col("dur_ns").std(ddof=1).fill_null(0.0).alias("stddev_ns"),
        pl.col("kind").first().alias("kind"),
    )
    total = pl.col("total_ns").sum().over(by) if by else pl.col("total_ns").sum()
    stats = stats.with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
    return stats.sort([*by, "total_ns", "name"], descending=[False] * len(by) + [True, False]).select(
        *by, "name", "kind", *STAT_COLUMNS
    )
