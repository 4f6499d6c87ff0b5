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


# A decode window of the energy pass is numbered by its forward pass (decode step 1 is the second forward pass);
# kernels.parquet numbers decode steps from 0 (`ks.phase:decode:0` is the second forward pass): window step
# DECODE_STEP_OFFSET + s is the kernels' step s.
DECODE_STEP_OFFSET = 1


@dataclass(frozen=True)
class EnergyTables:
    """power.parquet and energy.parquet of a run, read back with the columns of POWER_SCHEMA and WINDOW_SCHEMA
    (unreadable values null); `problem`: why a table holds nothing usable (one line naming the file), else None."""

    samples: pl.DataFrame
    windows: pl.DataFrame
    problem: str | None = None
