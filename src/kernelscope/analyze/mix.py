"""Kernel mix: device time by category and by library, per phase; top kernels by single-launch duration."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.wide_tables import as_codes, as_text
from kernelscope.contracts.tables import INSTANCES


def mix_tables(kernels: pl.DataFrame, columns: tuple[str, ...]) -> dict[str, pl.DataFrame]:
    """Per value of each of `columns` (category, library): kernels (distinct names), launches, device time, share.
    One pass over the kernels: they are grouped by name and every column once (a few hundred rows), and each table
    is made from those groups."""
    total = kernels["dur_ns"].sum() or 1
    read = kernels.select(*columns, "name", "dur_ns", INSTANCES).with_columns(as_codes("name"))  # names as codes
    by_name = read.group_by(*columns, "name").agg(launch_count().alias("launches"),
                                                  pl.col("dur_ns").sum().alias("total_ns"))
    return {column: (
        by_name.group_by(column)
        .agg(pl.col("name").n_unique().alias("kernels"), pl.col("launches").sum(), pl.col("total_ns").sum())
        .with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
        .sort(["total_ns", column], descending=[True, False], nulls_last=True)  # ties in a fixed order
    ) for column in columns}


def longest_launches(kernels: pl.DataFrame, top: int, summary: pl.DataFrame | None = None) -> pl.DataFrame:
    """Kernels by their longest single launch (with median and count), the shape of a top-by-duration table.
    Longest and median launch are those of kernel_summary (null where a summary row does not give them; `summary`:
    kernel_summary(kernels), where the caller has it). kernels are placed on the roofline
    (analyze.roofline.place_on_roofline)."""
    summary = kernel_summary(kernels) if summary is None else summary
    stats = summary.select("name", "max_ns", "med_ns", "instances")
    classes = (kernels.select("name", "roofline_class").with_columns(as_codes("name"))
               .group_by("name").agg(pl.col("roofline_class").first())
               .with_columns(as_text("name")))
    return (
        stats.join(classes, on="name", how="left", maintain_order="left")
        .sort("max_ns", descending=True, nulls_last=True, maintain_order=True)
        .head(top)
    )
