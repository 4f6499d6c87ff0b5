"""Where the device time comes from in the source: per source line (the innermost user or model frame open at
each kernel's launch; analyze/attribution/python_frames.py), its device time, launches and the kernels it launched."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.launch_counts import launch_count


def source_line_table(kernels: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame | None:
    """Rows by device time: source_line, total_ns, time_pct (of all device time), launches, kernels (distinct),
    top_kernel (the label holding most of the line's time), module (the module holding most of it). None when no
    kernel has a source line."""
    lined = kernels.filter(pl.col("source_line").is_not_null())
    if lined.height == 0:
        return None
    total = kernels["dur_ns"].sum() or 1
    named = lined.join(labels.select("name", "label"), on="name", how="left")
    # Ties in time go to the first name (the same file every run: a line's work spread evenly over the layers'
    # modules tied, and the group-by's order picked one).
    top_kernel = (named.group_by("source_line", "label").agg(pl.col("dur_ns").sum())
                  .sort(["dur_ns", "label"], descending=[True, False], nulls_last=True)
                  .unique("source_line", keep="first", maintain_order=True)
                  .select("source_line", pl.col("label").alias("top_kernel")))
    top_module = (named.group_by("source_line", "module").agg(pl.col("dur_ns").sum())
                  .sort(["dur_ns", "module"], descending=[True, False], nulls_last=True)
                  .unique("source_line", keep="first", maintain_order=True)
                  .select("source_line", "module"))
    return (
        named.group_by("source_line")
        .agg(pl.col("dur_ns").sum().alias("total_ns"), launch_count().alias("launches"),
             pl.col("name").n_unique().alias("kernels"))
        .with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
        .join(top_kernel, on="source_line", how="left")
        .join(top_module, on="source_line", how="left")
        .sort("total_ns", "source_line", descending=[True, False])
    )
