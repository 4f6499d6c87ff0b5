"""Kernel mix: device time by category and by library, per phase; top kernels by single-launch duration."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.contracts.tables import INSTANCES


def mix_table(kernels: pl.DataFrame, column: str) -> pl.DataFrame:
    """Per value of `column` (category or library): kernels (distinct names), launches, device time, share."""
    total = kernels["dur_ns"].sum() or 1
    # Names counted as category codes: hashing long kernel names was most of this table's time on big runs.
    read = kernels.select(column, pl.col("name").cast(pl.Categorical), "dur_ns",
                          *([INSTANCES] if INSTANCES in kernels.columns else []))
    return (
        read.group_by(column)
        .agg(pl.col("name").n_unique().alias("kernels"), launch_count().alias("launches"),
             pl.col("dur_ns").sum().alias("total_ns"))
        .with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
        .sort("total_ns", descending=True)
    )


def longest_launches(kernels: pl.DataFrame, top: int, summary: pl.DataFrame | None = None) -> pl.DataFrame:
    """Kernels by their longest single launch (with median and count), the shape of a top-by-duration table.
    Longest and median launch are those of kernel_summary (null where a summary row does not give them; `summary`:
    kernel_summary(kernels), where the caller has it). kernels are placed on the roofline
    (analyze.roofline.place_on_roofline)."""
    summary = kernel_summary(kernels) if summary is None else summary
    stats = summary.select("name", "max_ns", "med_ns", "instances")
    classes = (kernels.select(pl.col("name").cast(pl.Categorical), "roofline_class")  # names hashed once, as codes
               .group_by("name").agg(pl.col("roofline_class").first())
               .with_columns(pl.col("name").cast(pl.String)))
    return (
        stats.join(classes, on="name", how="left", maintain_order="left")
        .sort("max_ns", descending=True, nulls_last=True, maintain_order=True)
        .head(top)
    )
