"""A run in memory: its metadata (run.json) and its tables, as a run directory holds them."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kernelscope.contracts.energy_tables import EnergyTables
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.tables import conform_calls, conform_kernels, conform_ops


@dataclass
class Run:
    """kernels: one row per device kernel / memcpy / memset (per leaf CPU op on CPU-only runs), attributed, with
    every column of contracts.tables.KERNEL_COLUMNS. ops: CPU ops and annotation ranges. ncu: Nsight Compute
    measurements of profiled launches, when collected. calls: the runtime calls that launched no device work
    (synchronisations, event records and waits; None for runs written before they were kept, and for sources
    without a timeline)."""

    info: RunInfo
    kernels: pl.DataFrame
    ops: pl.DataFrame
    ncu: pl.DataFrame | None = None
    calls: pl.DataFrame | None = None
    energy: EnergyTables | None = None  # power.parquet and energy.parquet (profile --energy)

    def __post_init__(self) -> None:
        self.kernels = conform_kernels(self.kernels)
        self.ops = conform_ops(self.ops)
        if self.calls is not None:
            self.calls = conform_calls(self.calls)

    def with_kernels(self, kernels: pl.DataFrame) -> Run:
        return Run(info=self.info, kernels=kernels, ops=self.ops, ncu=self.ncu, calls=self.calls, energy=self.energy)
