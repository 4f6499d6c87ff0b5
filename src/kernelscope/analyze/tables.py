"""The tables a report shows, computed from a Profile. Pure: no formatting, no files."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.layers import layer_breakdown, layer_type_totals, per_layer_times
from kernelscope.analyze.phases import phase_table, step_table
from kernelscope.load.profile import Profile


@dataclass
class ReportTables:
    phases: pl.DataFrame
    steps: pl.DataFrame
    kernels_by_phase: dict[str, pl.DataFrame] = field(default_factory=dict)
    layer_breakdown: dict[str, pl.DataFrame] = field(default_factory=dict)
    layer_types: dict[str, pl.DataFrame] = field(default_factory=dict)
    per_layer: dict[str, pl.DataFrame] = field(default_factory=dict)
    unattributed: pl.DataFrame | None = None


def report_tables(profile: Profile) -> ReportTables:
    kernels = profile.kernels
    phases = phase_table(kernels)
    steps = {row["phase"]: row["steps"] for row in phases.iter_rows(named=True)}
    by_phase = kernel_summary(kernels, by=["phase"])
    tables = ReportTables(phases=phases, steps=step_table(kernels))
    has_modules = kernels["module"].is_not_null().any()
    for phase in phases["phase"]:
        tables.kernels_by_phase[phase] = by_phase.filter(pl.col("phase") == phase).drop("phase")
        if has_modules and phase != ranges.UNKNOWN:
            subset = kernels.filter(pl.col("phase") == phase)
            breakdown = layer_breakdown(subset, profile.layer_types, steps)
            tables.layer_breakdown[phase] = breakdown.drop("phase")
            tables.layer_types[phase] = layer_type_totals(breakdown).drop("phase")
            tables.per_layer[phase] = per_layer_times(subset, profile.layer_types, steps).drop("phase")
    missing = kernels.filter((pl.col("phase") == ranges.UNKNOWN) | pl.col("module").is_null())
    tables.unattributed = kernel_summary(missing) if missing.height else None
    return tables
