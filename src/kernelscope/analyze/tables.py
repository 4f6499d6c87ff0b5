"""The tables a report shows, computed from a Profile. Pure: no formatting, no files."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.costs import kernel_costs
from kernelscope.analyze.hardware import Ceilings, classification_rule
from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.layers import layer_breakdown, layer_type_totals, per_layer_times
from kernelscope.analyze.measured import analytic_vs_measured, measured_by_kernel, measured_class_table
from kernelscope.analyze.phases import phase_table, step_table
from kernelscope.analyze.roofline import (
    class_table,
    cost_coverage,
    kernel_points,
    kernel_roofline_table,
    place_on_roofline,
)
from kernelscope.load.profile import Profile


@dataclass
class ReportTables:
    phases: pl.DataFrame
    steps: pl.DataFrame
    kernels: pl.DataFrame  # every kernel with costs and roofline columns
    ceilings: Ceilings | None = None
    kernels_by_phase: dict[str, pl.DataFrame] = field(default_factory=dict)
    layer_breakdown: dict[str, pl.DataFrame] = field(default_factory=dict)
    layer_types: dict[str, pl.DataFrame] = field(default_factory=dict)
    per_layer: dict[str, pl.DataFrame] = field(default_factory=dict)
    classes: dict[str, pl.DataFrame] = field(default_factory=dict)
    roofline_points: dict[str, pl.DataFrame] = field(default_factory=dict)
    roofline_kernels: dict[str, pl.DataFrame] = field(default_factory=dict)
    cost_coverage: dict[str, float] = field(default_factory=dict)
    unattributed: pl.DataFrame | None = None
    measured_phase: str | None = None
    measured_kernels: pl.DataFrame | None = None  # per profiled kernel: Nsight Compute means, measured class
    measured_classes: pl.DataFrame | None = None
    analytic_vs_measured: pl.DataFrame | None = None
    ncu_launches: pl.DataFrame | None = None


def with_costs(profile: Profile) -> pl.DataFrame:
    """The run's kernels with their analytic costs (stored in kernels.parquet by newer runs)."""
    if "flops" in profile.kernels.columns:
        return profile.kernels
    return kernel_costs(profile.kernels, profile.ops)


def report_tables(profile: Profile, ceilings: Ceilings | None = None) -> ReportTables:
    kernels = place_on_roofline(with_costs(profile), ceilings)
    phases = phase_table(kernels)
    steps = {row["phase"]: row["steps"] for row in phases.iter_rows(named=True)}
    by_phase = kernel_summary(kernels, by=["phase"])
    tables = ReportTables(phases=phases, steps=step_table(kernels), kernels=kernels, ceilings=ceilings)
    has_modules = kernels["module"].is_not_null().any()
    group_column = "category" if "category" in kernels.columns else "cost_model"
    for phase in phases["phase"]:
        subset = kernels.filter(pl.col("phase") == phase)
        tables.kernels_by_phase[phase] = by_phase.filter(pl.col("phase") == phase).drop("phase")
        tables.cost_coverage[phase] = cost_coverage(subset)
        if has_modules and phase != ranges.UNKNOWN:
            breakdown = layer_breakdown(subset, profile.layer_types, steps)
            tables.layer_breakdown[phase] = breakdown.drop("phase")
            tables.layer_types[phase] = layer_type_totals(breakdown).drop("phase")
            tables.per_layer[phase] = per_layer_times(subset, profile.layer_types, steps).drop("phase")
        if ceilings is not None:
            tables.classes[phase] = class_table(subset)
            points = kernel_points(subset.with_columns(pl.col(group_column).fill_null("other")), group_column)
            label = pl.col("friendly_name") if "friendly_name" in points.columns else pl.col("name")
            tables.roofline_points[phase] = points.with_columns(label.alias("label"))
            tables.roofline_kernels[phase] = kernel_roofline_table(tables.roofline_points[phase], ceilings)
    if profile.ncu is not None and profile.ncu.height:
        phase = (profile.run.get("ncu") or {}).get("phase") or ranges.DECODE
        rule = classification_rule()
        by_kernel = measured_by_kernel(profile.ncu, ceilings, rule["latency_ns"])
        tables.measured_phase = phase
        tables.ncu_launches = profile.ncu
        tables.measured_kernels = by_kernel
        tables.measured_classes = measured_class_table(by_kernel)
        tables.analytic_vs_measured = analytic_vs_measured(by_kernel, kernels.filter(pl.col("phase") == phase))
    missing = kernels.filter((pl.col("phase") == ranges.UNKNOWN) | pl.col("module").is_null())
    tables.unattributed = kernel_summary(missing) if missing.height else None
    return tables
