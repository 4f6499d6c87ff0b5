"""Nsight Compute measurements joined to a run's kernels, measured classification and per-class means.

Join: kernels are matched by their base function name and launch configuration (grid, block), then by
invocation order within the phase: the k-th profiled launch of a configuration is the k-th launch of that
configuration in the run's phase (the replay is deterministic and ncu profiles the first launches of each
configuration).

Measured class (docs/roofline.md): with measured intensity = FLOPs / DRAM bytes and the ridge point of the
device, a kernel is memory-bound when its intensity is below the ridge and its memory throughput (% of peak)
clearly exceeds its SM throughput, compute-bound in the mirror case, latency-bound when it is short and
approaches neither, under-utilised when it is longer and approaches neither, balanced when it approaches a roof with
neither throughput clearly ahead (memory and SM both busy).
"""

from __future__ import annotations

import re

import polars as pl

from kernelscope.analyze.hardware import Ceilings

CLEARLY = 1.25  # "clearly exceeds": at least this ratio between the two throughputs
APPROACH_PCT = 20.0  # the larger throughput must reach this share of its peak to name a bound
MEASURED_CLASSES = ["memory-bound", "compute-bound", "balanced", "under-utilised", "latency-bound", "unclassified"]
MEAN_COLUMNS = ["sm_throughput_pct", "dram_throughput_pct", "mem_throughput_pct", "achieved_occupancy_pct",
                "l1_hit_rate_pct", "l2_hit_rate_pct", "duration_us"]


def base_function_name(name: str) -> str:
    """The unqualified function name of a demangled kernel signature, the same for CUPTI's and Nsight's
    spellings: 'void at::native::vectorized_elementwise_kernel<4, …>(int, …)' → 'vectorized_elementwise_kernel'."""
    # '(anonymous namespace)' qualifies a name (CUPTI's spelling; Nsight's is '<unnamed>'): not a parameter list.
    text = name.strip().replace("(anonymous namespace)", "{anonymous}")
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the parameter list starts at the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    head = text[:cut]
    stripped, depth = [], 0
    for ch in head:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            stripped.append(ch)
    qualified = "".join(stripped).strip().split(" ")[-1]  # drop a leading return type
    return qualified.split("::")[-1] or text


def kernel_name_regex(names: list[str]) -> str:
    bases = sorted({base_function_name(n) for n in names})
    return "^(" + "|".join(re.escape(b) for b in bases) + ")$"


def join_measurements(kernels: pl.DataFrame, ncu: pl.DataFrame, phase: str) -> pl.DataFrame:
    """ncu launches with the matched run kernel: kernel_id, name, phase, step, module."""
    key = ["base", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    run = (
        kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel"))
        .sort("start_ns")
        .with_columns(pl.col("name").map_elements(base_function_name, return_dtype=pl.String).alias("base"))
        .with_columns(pl.int_range(pl.len()).over(key).alias("invocation"))
        .select(*key, "invocation", "kernel_id", "name", "phase", "step", "module")
    )
    measured = (
        ncu.with_columns(pl.col("kernel_name").map_elements(base_function_name, return_dtype=pl.String).alias("base"))
        .sort("launch")
        .with_columns(pl.int_range(pl.len()).over(key).alias("invocation"))
    )
    return measured.join(run, on=[*key, "invocation"], how="left")


def measured_by_kernel(joined: pl.DataFrame, ceilings: Ceilings | None, latency_ns: float) -> pl.DataFrame:
    """Per run kernel name: means over its profiled launches, measured intensity and class."""
    matched = joined.filter(pl.col("name").is_not_null())
    present = [c for c in MEAN_COLUMNS if c in matched.columns]
    table = matched.group_by("name").agg(
        pl.len().alias("profiled_launches"),
        *(pl.col(c).mean() for c in present),
        pl.col("dram_bytes").mean(),
        pl.col("flops").mean(),
        pl.col("kernel_name").first().alias("ncu_name"),
    )
    ridge = ceilings.ridge("bf16") if ceilings else None
    table = table.with_columns((pl.col("flops") / pl.col("dram_bytes")).alias("measured_intensity"))
    sm, mem = pl.col("sm_throughput_pct").fill_null(0), pl.col("mem_throughput_pct").fill_null(0)
    top = pl.max_horizontal(sm, mem)
    below_ridge = (
        pl.col("measured_intensity") < ridge if ridge else pl.lit(True)
    ).fill_null(True)  # no FLOPs counted: treat as below the ridge
    cls = (
        pl.when(pl.col("sm_throughput_pct").is_null() & pl.col("mem_throughput_pct").is_null()).then(pl.lit("unclassified"))
        .when((top >= APPROACH_PCT) & below_ridge & (mem >= CLEARLY * sm)).then(pl.lit("memory-bound"))
        .when((top >= APPROACH_PCT) & ~below_ridge & (sm >= CLEARLY * mem)).then(pl.lit("compute-bound"))
        .when((top < APPROACH_PCT) & (pl.col("duration_us") * 1e3 < latency_ns)).then(pl.lit("latency-bound"))
        .when(top < APPROACH_PCT).then(pl.lit("under-utilised"))
        .otherwise(pl.lit("balanced"))
    )
    # Ties in duration (ncu rounds to cycles) break by name, so the order does not depend on group_by's.
    return table.with_columns(cls.alias("measured_class")).sort(["duration_us", "name"], descending=[True, False])


def measured_class_table(by_kernel: pl.DataFrame) -> pl.DataFrame:
    """Per measured class: kernel count and share, unweighted means of the throughput, occupancy, hit-rate and
    duration columns, and an overall row with the means over all kernels."""
    present = [c for c in MEAN_COLUMNS if c in by_kernel.columns]
    n = by_kernel.height or 1
    per_class = by_kernel.group_by("measured_class").agg(
        pl.len().alias("kernels"), *(pl.col(c).mean() for c in present)
    ).with_columns((100.0 * pl.col("kernels") / n).alias("share_pct"))
    overall = by_kernel.select(
        pl.lit("overall").alias("measured_class"), pl.len().alias("kernels"), *(pl.col(c).mean() for c in present)
    ).with_columns(pl.lit(100.0).alias("share_pct"))
    order = {c: i for i, c in enumerate([*MEASURED_CLASSES, "overall"])}
    return (
        pl.concat([per_class, overall], how="diagonal_relaxed")
        .with_columns(pl.col("measured_class").replace_strict(order, default=99).alias("_o"))
        .sort("_o").drop("_o")
    )


def analytic_vs_measured(by_kernel: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Per profiled kernel: analytic FLOPs and bytes per launch (cost models) against the measured ones."""
    analytic = kernels.group_by("name").agg(
        (pl.col("flops").sum() / pl.len()).alias("analytic_flops"),
        (pl.col("bytes_moved").sum() / pl.len()).alias("analytic_bytes"),
    )
    return by_kernel.join(analytic, on="name", how="left").with_columns(
        (pl.col("analytic_flops") / pl.col("flops")).alias("flops_ratio"),
        (pl.col("analytic_bytes") / pl.col("dram_bytes")).alias("bytes_ratio"),
    ).select("name", "profiled_launches", "duration_us", "analytic_flops", "flops", "flops_ratio",
             "analytic_bytes", "dram_bytes", "bytes_ratio", "measured_class")
