"""Nsight Compute for the whole run (`kernelscope ncu RUN --coverage F`, docs/cli.md): which distinct
(kernel, launch configuration) to profile so that their launches hold at least F of a phase's device time, and the
measurements of each configuration joined to every launch of it.

A launch configuration is the kernel's function name with its grid and block: launches of one configuration do the
same work in an eager decode step, so one profiled launch stands for all of them (the counters are those of the first
launch profiled; its duration and the others' may differ by the noise of the run).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kernelscope.analyze.costs.ncu_measurements import base_function_name

CONFIG = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
GEOMETRY = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
COUNTERS = ["dram_bytes", "flops", "duration_us", "sm_throughput_pct", "dram_throughput_pct", "mem_throughput_pct",
            "achieved_occupancy_pct", "l1_hit_rate_pct", "l2_hit_rate_pct"]


@dataclass(frozen=True)
class CoveragePlan:
    """The configurations chosen (descending device time, until the share is reached) and the share they hold."""

    phase: str
    configs: pl.DataFrame  # CONFIG, launches, dur_ns, share, cumulative_share
    share: float  # of the phase's device time in kernels (0..1)

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(self.configs["name"].to_list()))


def coverage_plan(kernels: pl.DataFrame, phase: str, coverage: float) -> CoveragePlan:
    """The distinct launch configurations of the phase's kernels in descending total device time (ties by name and
    geometry), taken until their launches hold at least `coverage` of the phase's kernel time; the one that crosses
    it is included."""
    phase_kernels = kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel"))
    total = float(phase_kernels["dur_ns"].sum() or 0)
    configs = (phase_kernels.group_by(CONFIG, maintain_order=True)
               .agg(pl.len().alias("launches"), pl.col("dur_ns").sum().cast(pl.Float64))
               .sort(["dur_ns", *CONFIG], descending=[True, *([False] * len(CONFIG))], nulls_last=True))
    if total <= 0:
        return CoveragePlan(phase, configs.head(0), 0.0)
    configs = configs.with_columns((pl.col("dur_ns") / total).alias("share")).with_columns(
        pl.col("share").cum_sum().alias("cumulative_share"))
    # Rows before the crossing have a cumulative share below the goal; the crossing row is the first at or above it.
    before = configs.filter(pl.col("cumulative_share") < coverage - 1e-12)
    chosen = configs.head(min(before.height + 1, configs.height))
    return CoveragePlan(phase, chosen, float(chosen["share"].sum()))


def every_launch(kernels: pl.DataFrame, ncu: pl.DataFrame, phase: str) -> pl.DataFrame:
    """Every kernel launch of the phase with the counters of its configuration where Nsight Compute profiled one of
    its launches (the mean over those it profiled; `measured_launches`: how many), null otherwise. ncu's rows are
    matched by base function name and geometry, as join_measurements matches them."""
    launches = (kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel"))
                .with_columns(pl.col("name").map_elements(base_function_name, return_dtype=pl.String).alias("_base")))
    present = [c for c in COUNTERS if c in ncu.columns]
    measured = (ncu.with_columns(pl.col("kernel_name").map_elements(base_function_name, return_dtype=pl.String)
                                 .alias("_base"))
                .group_by(["_base", *GEOMETRY])
                .agg(pl.len().alias("measured_launches"), *(pl.col(c).mean() for c in present)))
    return launches.join(measured, on=["_base", *GEOMETRY], how="left", nulls_equal=True).drop("_base")


def measured_share(joined: pl.DataFrame) -> float:
    """Share of the phase's kernel time in launches with a measurement (every_launch's rows)."""
    total = float(joined["dur_ns"].sum() or 0)
    if total <= 0:
        return 0.0
    return float(joined.filter(pl.col("measured_launches").is_not_null())["dur_ns"].sum()) / total
