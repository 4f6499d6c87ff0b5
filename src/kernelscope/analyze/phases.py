"""Device time per phase and per decode step."""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.launches import launch_count
from kernelscope.load.profile import with_instances

PHASE_ORDER = [ranges.PREFILL, ranges.DECODE, ranges.UNKNOWN]


def phase_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase: launches (kernel_count), device time, steps, device time and launches per step, share of all
    device time, and the span from the first kernel's start to the last kernel's end.

    Decode counts its distinct step numbers; another phase counts one step. Steps stay null where they are
    unknown (decode without step numbers; phases of summary rows, which have no timeline), and so do the per-step
    figures. Span, GPU busy and gaps need start times: null for summary rows."""
    kernels = with_instances(kernels)
    total = kernels["dur_ns"].sum() or 1
    decode_steps = pl.col("step").drop_nulls().n_unique()
    table = kernels.group_by("phase").agg(
        launch_count().alias("kernel_count"),
        pl.col("dur_ns").sum().alias("device_time_ns"),
        pl.when(decode_steps > 0).then(decode_steps).alias("_decode_steps"),
        pl.col("start_ns").is_not_null().any().alias("_timeline"),
        pl.col("start_ns").min().alias("first_start_ns"),
        (pl.col("start_ns") + pl.col("dur_ns")).max().alias("last_end_ns"),
    )
    table = table.with_columns(
        pl.when(pl.col("phase") == ranges.DECODE).then(pl.col("_decode_steps"))
        .when(pl.col("_timeline")).then(1).cast(pl.Int64).alias("steps"),
    ).with_columns(
        (pl.col("device_time_ns") / pl.col("steps")).alias("device_time_per_step_ns"),
        (pl.col("kernel_count") / pl.col("steps")).alias("kernels_per_step"),
        (100.0 * pl.col("device_time_ns") / total).alias("time_pct"),
        (pl.col("last_end_ns") - pl.col("first_start_ns")).alias("span_ns"),
    ).drop("_decode_steps", "_timeline")
    busy = pl.DataFrame(
        [(phase, busy_ns(group)) for (phase,), group in kernels.group_by("phase")],
        schema={"phase": pl.String, "busy_ns": pl.Int64}, orient="row",
    )
    launch = (
        kernels.group_by("phase").agg(pl.col("launch_dur_ns").mean().alias("mean_launch_ns"))
        if "launch_dur_ns" in kernels.columns
        else table.select("phase", pl.lit(None, dtype=pl.Float64).alias("mean_launch_ns"))
    )
    table = table.join(busy, on="phase", how="left").join(launch, on="phase", how="left").with_columns(
        (100.0 * pl.col("busy_ns") / pl.col("span_ns")).alias("busy_pct"),
        ((pl.col("span_ns") - pl.col("busy_ns")) / pl.col("kernel_count")).alias("mean_gap_ns"),
    )
    return _ordered(table).drop("first_start_ns", "last_end_ns")


def busy_ns(kernels: pl.DataFrame) -> int | None:
    """Time during which at least one kernel runs (the union of kernel intervals), summed over devices; None
    without start times (summary rows)."""
    kernels = kernels.filter(pl.col("start_ns").is_not_null())
    if kernels.height == 0:
        return None
    total = 0
    by_device = kernels.group_by("device") if "device" in kernels.columns else [((None,), kernels)]
    for _, group in by_device:
        order = group.sort("start_ns")
        start = order["start_ns"].to_numpy()
        end = start + order["dur_ns"].to_numpy()
        reach = np.maximum.accumulate(end)
        # A new busy stretch begins where a kernel starts after everything before it has ended.
        breaks = np.flatnonzero(start[1:] > reach[:-1]) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks - 1, [len(start) - 1]))
        total += int((reach[last] - start[first]).sum())
    return total


def step_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Device time and launch count of each decode step (rows without a step number are left out)."""
    return (
        with_instances(kernels).filter((pl.col("phase") == ranges.DECODE) & pl.col("step").is_not_null())
        .group_by("step")
        .agg(launch_count().alias("kernel_count"), pl.col("dur_ns").sum().alias("device_time_ns"))
        .sort("step")
    )


def _ordered(table: pl.DataFrame) -> pl.DataFrame:
    rank = {name: i for i, name in enumerate(PHASE_ORDER)}
    return (
        table.with_columns(pl.col("phase").replace_strict(rank, default=len(rank)).alias("_order"))
        .sort("_order", "phase")
        .drop("_order")
    )
