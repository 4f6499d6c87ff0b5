"""What `profile --energy` hands from capture to analysis (docs/energy.md, docs/run-format.md): the stage and
window names, each stage's bounds, and the columns of power.parquet and energy.parquet as written."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

PREFILL_ONLY, GENERATION = "prefill_only", "generation"  # the stages, in the order they run
SETUP, PREFILL, DECODE = "setup", "prefill", "decode"  # the windows of a generation

# power.parquet: one row per read of NVML, on the host's monotonic clock (ns).
POWER_SCHEMA = {"host_ns": pl.Int64, "energy_mj": pl.Int64, "energy_at_ns": pl.Int64, "power_mw": pl.Int64,
                "power_at_ns": pl.Int64}
# energy.parquet before its joules are added (analyze/energy.window_energy adds `joules`, `joules_from_power`).
WINDOW_SCHEMA = {"stage": pl.String, "repeat": pl.Int64, "generation": pl.Int64, "phase": pl.String,
                 "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "tokens": pl.Int64}


@dataclass(frozen=True)
class StageBounds:
    """A stage of the energy pass on power.parquet's clock, and how many generations it ran."""

    name: str
    started_ns: int
    ended_ns: int
    generations: int
