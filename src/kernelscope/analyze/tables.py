"""The tables a report shows, computed from a Profile. Pure: no formatting, no files."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.accelerator import AcceleratorNeeds, accelerator_needs
from kernelscope.analyze.catalog import with_catalog
from kernelscope.analyze.costs import kernel_costs
from kernelscope.analyze.findings import Finding, Metric, compute_metrics, evaluate
from kernelscope.analyze.generations import generation_table
from kernelscope.analyze.hardware import Ceilings, classification_rule
from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.launches import has_timeline
from kernelscope.analyze.layers import layer_breakdown, layer_type_totals, per_layer_times
from kernelscope.analyze.measured import analytic_vs_measured, measured_by_kernel, measured_class_table
from kernelscope.analyze.mix import longest_launches, mix_table
from kernelscope.analyze.op_groups import op_group_table
from kernelscope.analyze.phases import phase_table, step_table
from kernelscope.analyze.projection import Options, default_model, projection_inputs, target_from_ceilings
from kernelscope.analyze.roofline import (
    class_table,
    cost_coverage,
    kernel_points,
    kernel_roofline_table,
    place_on_roofline,
)
from kernelscope.analyze.whatif import WhatIf, what_if
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
    labels: pl.DataFrame | None = None  # name → label, library, category, description
    catalog_coverage: dict[str, float] = field(default_factory=dict)
    unknown_kernels: dict[str, pl.DataFrame] = field(default_factory=dict)
    op_groups: dict[str, pl.DataFrame] = field(default_factory=dict)
    categories: dict[str, pl.DataFrame] = field(default_factory=dict)
    libraries: dict[str, pl.DataFrame] = field(default_factory=dict)
    longest: dict[str, pl.DataFrame] = field(default_factory=dict)
    accelerator: AcceleratorNeeds | None = None
    projection: WhatIf | None = None  # the what-if model on this run's own device (calibration, design options)
    generations: pl.DataFrame | None = None  # per image of runs with one generation per image
    metrics: dict[str, Metric] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def with_costs(profile: Profile) -> pl.DataFrame:
    """The run's kernels with their analytic costs and catalog columns (stored in kernels.parquet by newer
    runs; computed here for older ones)."""
    kernels = profile.kernels
    if "flops" not in kernels.columns:
        kernels = kernel_costs(kernels, profile.ops)
    if "library" not in kernels.columns:
        kernels = with_kernel_catalog(kernels)
    return kernels


CPU_OP_LIBRARY = "PyTorch (CPU op)"


def with_kernel_catalog(kernels: pl.DataFrame) -> pl.DataFrame:
    """The catalog's columns for device kernels; on CPU-only runs, whose rows are framework ops, the op name
    itself (the catalog describes GPU kernels)."""
    k = with_catalog(kernels)
    cpu = pl.col("kind") == "cpu_op"
    return k.with_columns(
        pl.when(cpu).then(pl.lit(CPU_OP_LIBRARY)).otherwise(pl.col("library")).alias("library"),
        pl.when(cpu).then(pl.lit("other")).otherwise(pl.col("category")).alias("category"),
        pl.when(cpu).then(pl.col("name")).otherwise(pl.col("friendly_name")).alias("friendly_name"),
        pl.when(cpu).then(pl.lit("A framework operator on the CPU; its self time stands in for a kernel."))
        .otherwise(pl.col("description")).alias("description"),
    )


def kernel_labels(kernels: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct kernel name: its label in reports (the catalog's friendly name; when several
    names share one, the later ones by total time get #2, #3 …), library, category, description."""
    table = (
        kernels.group_by("name")
        .agg(pl.col("dur_ns").sum().alias("total_ns"), pl.col("friendly_name").first(), pl.col("library").first(),
             pl.col("category").first(), pl.col("description").first())
        .sort("total_ns", "name", descending=[True, False])
        .with_columns(pl.int_range(1, pl.len() + 1).over("friendly_name").alias("_n"))
    )
    return table.with_columns(
        pl.when(pl.col("_n") > 1).then(pl.format("{} #{}", pl.col("friendly_name"), pl.col("_n")))
        .otherwise(pl.col("friendly_name")).alias("label")
    ).drop("_n")


def catalog_coverage(kernels: pl.DataFrame) -> float:
    """Share of device time whose kernel has a known library and category."""
    total = kernels["dur_ns"].sum()
    known = kernels.filter((pl.col("library") != "unknown") & (pl.col("category") != "other"))["dur_ns"].sum()
    return float(known / total) if total else 0.0


def own_device_projection(kernels: pl.DataFrame, profile: Profile, ceilings: Ceilings | None) -> WhatIf | None:
    """The run projected onto the device that measured it by the shipped what-if model: how well the model
    explains it, what each design option would buy, what latency goals need. GPU runs with costs only."""
    if ceilings is None or not ceilings.bandwidth or not kernels.height or "bytes_moved" not in kernels.columns:
        return None
    if (kernels["kind"] == "cpu_op").all() or kernels["bytes_moved"].is_null().all():
        return None
    model = default_model()
    source = target_from_ceilings(ceilings, model)
    inputs = projection_inputs(kernels, profile.ncu, model)
    return what_if(inputs, source, source, model, Options(), source.l2_bytes, profile.run, sweeps=[])


def report_tables(profile: Profile, ceilings: Ceilings | None = None) -> ReportTables:
    kernels = place_on_roofline(with_costs(profile), ceilings)
    phases = phase_table(kernels)
    steps = {row["phase"]: row["steps"] for row in phases.iter_rows(named=True)}
    labels = kernel_labels(kernels)
    label_of = labels.select("name", "label", "library", "category", "description")
    by_phase = kernel_summary(kernels, by=["phase"]).join(label_of, on="name", how="left", maintain_order="left")
    tables = ReportTables(phases=phases, steps=step_table(kernels), kernels=kernels, ceilings=ceilings,
                          labels=labels, generations=generation_table(kernels, phases["phase"].to_list(), profile.run))
    has_modules = kernels["module"].is_not_null().any()
    # Op groups need launch order or framework ops; kernel summaries (nsys stats imports) have neither.
    has_groups = has_timeline(kernels) or ("top_op_id" in kernels.columns and kernels["top_op_id"].is_not_null().any())
    group_column = "category" if "category" in kernels.columns else "cost_model"
    for phase in phases["phase"]:
        subset = kernels.filter(pl.col("phase") == phase)
        tables.kernels_by_phase[phase] = by_phase.filter(pl.col("phase") == phase).drop("phase")
        tables.cost_coverage[phase] = cost_coverage(subset)
        tables.catalog_coverage[phase] = catalog_coverage(subset)
        tables.categories[phase] = mix_table(subset, "category")
        tables.libraries[phase] = mix_table(subset, "library")
        tables.longest[phase] = longest_launches(subset, 15).join(label_of, on="name", how="left",
                                                                   maintain_order="left")
        unknown = subset.filter((pl.col("library") == "unknown") | (pl.col("category") == "other"))
        if unknown.height:
            tables.unknown_kernels[phase] = kernel_summary(unknown).head(10)
        if has_groups:
            labelled = subset.join(label_of.select("name", "label"), on="name", how="left")
            tables.op_groups[phase] = op_group_table(labelled.with_columns(pl.col("label").alias("friendly_name")))
        if has_modules and phase != ranges.UNKNOWN:
            breakdown = layer_breakdown(subset, profile.layer_types_of(phase), steps)
            tables.layer_breakdown[phase] = breakdown.drop("phase").join(
                label_of, on="name", how="left", maintain_order="left")
            tables.layer_types[phase] = layer_type_totals(breakdown).drop("phase")
            tables.per_layer[phase] = per_layer_times(subset, profile.layer_types_of(phase), steps).drop("phase")
        if ceilings is not None:
            tables.classes[phase] = class_table(subset)
            points = kernel_points(subset.with_columns(pl.col(group_column).fill_null("other")), group_column)
            tables.roofline_points[phase] = points.join(label_of.select("name", "label"), on="name", how="left",
                                                        maintain_order="left")
            tables.roofline_kernels[phase] = kernel_roofline_table(tables.roofline_points[phase], ceilings)
    if profile.ncu is not None and profile.ncu.height:
        phase = (profile.run.get("ncu") or {}).get("phase") or ranges.DECODE
        rule = classification_rule()
        by_kernel = measured_by_kernel(profile.ncu, ceilings, rule["latency_ns"]).join(
            label_of, on="name", how="left", maintain_order="left")
        tables.measured_phase = phase
        tables.ncu_launches = profile.ncu
        tables.measured_kernels = by_kernel
        tables.measured_classes = measured_class_table(by_kernel)
        tables.analytic_vs_measured = analytic_vs_measured(by_kernel, kernels.filter(pl.col("phase") == phase)).join(
            label_of.select("name", "label"), on="name", how="left", maintain_order="left")
    tables.accelerator = accelerator_needs(kernels, profile.run, ceilings, tables.categories, profile.layer_types)
    tables.projection = own_device_projection(kernels, profile, ceilings)
    tables.metrics = compute_metrics(tables, profile.run)
    tables.findings = evaluate(tables.metrics)
    missing = kernels.filter((pl.col("phase") == ranges.UNKNOWN) | pl.col("module").is_null())
    tables.unattributed = (
        kernel_summary(missing).join(label_of, on="name", how="left", maintain_order="left") if missing.height else None
    )
    return tables
