"""Kernel mix: device time by category and by library, per phase; top kernels by single-launch duration."""

from __future__ import annotations

import polars as pl


def mix_table(kernels: pl.DataFrame, column: str) -> pl.DataFrame:
    """Per value of `column` (category or library): kernels (distinct names), launches, device time, share."""
    total = kernels["dur_ns"].sum() or 1
    return (
        kernels.group_by(column)
        .agg(pl.col("name").n_unique().alias("kernels"), pl.len().alias("launches"),
             pl.col("dur_ns").sum().alias("total_ns"))
        .with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
        .sort("total_ns", descending=True)
    )


def longest_launches(kernels: pl.DataFrame, top: int) -> pl.DataFrame:
    """Kernels by their longest single launch (with median and count), the shape of a top-by-duration table."""
    return (
        kernels.group_by("name")
        .agg(pl.col("dur_ns").max().alias("max_ns"), pl.col("dur_ns").median().alias("med_ns"),
             pl.len().alias("instances"), pl.col("roofline_class").first() if "roofline_class" in kernels.columns
             else pl.lit(None).alias("roofline_class"))
        .sort("max_ns", descending=True)
        .head(top)
    )
