"""Device time per phase and per decode step."""

from __future__ import annotations

import polars as pl

from kernelscope import ranges

PHASE_ORDER = [ranges.PREFILL, ranges.DECODE, ranges.UNKNOWN]


def phase_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase: kernels, device time, steps, device time and kernels per step, share of all device time,
    and the span from the first kernel's start to the last kernel's end."""
    total = kernels["dur_ns"].sum() or 1
    table = kernels.group_by("phase").agg(
        pl.len().alias("kernel_count"),
        pl.col("dur_ns").sum().alias("device_time_ns"),
        pl.col("step").n_unique().alias("steps"),
        pl.col("start_ns").min().alias("first_start_ns"),
        (pl.col("start_ns") + pl.col("dur_ns")).max().alias("last_end_ns"),
    )
    # A phase without step numbers (prefill, unknown) counts as one step.
    table = table.with_columns(
        pl.when(pl.col("phase") == ranges.DECODE).then(pl.col("steps")).otherwise(1).alias("steps"),
    ).with_columns(
        (pl.col("device_time_ns") / pl.col("steps")).alias("device_time_per_step_ns"),
        (pl.col("kernel_count") / pl.col("steps")).alias("kernels_per_step"),
        (100.0 * pl.col("device_time_ns") / total).alias("time_pct"),
        (pl.col("last_end_ns") - pl.col("first_start_ns")).alias("span_ns"),
    )
    return _ordered(table).drop("first_start_ns", "last_end_ns")


def step_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Device time and kernel count of each decode step."""
    return (
        kernels.filter(pl.col("phase") == ranges.DECODE)
        .group_by("step")
        .agg(pl.len().alias("kernel_count"), pl.col("dur_ns").sum().alias("device_time_ns"))
        .sort("step")
    )


def _ordered(table: pl.DataFrame) -> pl.DataFrame:
    rank = {name: i for i, name in enumerate(PHASE_ORDER)}
    return (
        table.with_columns(pl.col("phase").replace_strict(rank, default=len(rank)).alias("_order"))
        .sort("_order", "phase")
        .drop("_order")
    )
