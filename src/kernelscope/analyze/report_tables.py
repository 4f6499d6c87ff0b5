"""The tables a report shows, computed from a run. Pure: no formatting, no files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.costs.cost_coverage import cost_sources
from kernelscope.analyze.costs.gemm_table import gemm_shape_table
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.costs.naming import catalog_coverage, kernel_labels
from kernelscope.analyze.costs.ncu_measurements import (
    analytic_vs_measured,
    measured_by_kernel,
    measured_class_table,
)
from kernelscope.analyze.costs.roofline import (
    MissingCeiling,
    class_table,
    cost_coverage,
    kernel_points,
    kernel_roofline_table,
    missing_ceilings,
    place_on_roofline,
)
from kernelscope.analyze.findings import Finding, Metric, compute_metrics, evaluate
from kernelscope.analyze.hardware import Ceilings, classification_rule
from kernelscope.analyze.idle_gaps import IdleGaps, idle_gaps
from kernelscope.analyze.kernel_stats import SUMMARY_INPUT_COLUMNS, kernel_summary
from kernelscope.analyze.launch_counts import has_timeline
from kernelscope.analyze.mix import longest_launches, mix_tables
from kernelscope.analyze.op_groups import op_group_table
from kernelscope.analyze.paths.critical_path import CriticalPath
from kernelscope.analyze.paths.path_tables import PathTables, path_tables
from kernelscope.analyze.projection.accelerator import AcceleratorNeeds, accelerator_needs
from kernelscope.analyze.projection.projection import (
    Options,
    default_model,
    projection_inputs,
    target_from_ceilings,
)
from kernelscope.analyze.projection.whatif import WhatIf, what_if
from kernelscope.analyze.ranks.communication import Communication, communication
from kernelscope.analyze.ranks.ranks import rank_table, with_waiting
from kernelscope.analyze.source_lines import source_line_table
from kernelscope.analyze.structure.generations import generation_table
from kernelscope.analyze.structure.layers import layer_breakdown, layer_type_totals, per_layer_times
from kernelscope.analyze.structure.phases import phase_table, step_table, steps_of_every_phase
from kernelscope.contracts.run import Run


@dataclass
class PhaseTables:
    """Everything a report shows of one phase. Tables that do not apply to the run are None."""

    kernels: pl.DataFrame  # per kernel name: nsys-stats statistics, label, library, category, description
    cost_coverage: float
    catalog_coverage: float
    categories: pl.DataFrame
    libraries: pl.DataFrame
    longest: pl.DataFrame
    unknown_kernels: pl.DataFrame | None = None
    op_groups: pl.DataFrame | None = None
    layer_breakdown: pl.DataFrame | None = None  # runs with module attribution
    layer_types: pl.DataFrame | None = None
    per_layer: pl.DataFrame | None = None
    classes: pl.DataFrame | None = None  # devices with ceilings
    roofline_points: pl.DataFrame | None = None
    roofline_kernels: pl.DataFrame | None = None
    gemm_shapes: pl.DataFrame | None = None  # kernels with a GEMM shape (analyze/costs/gemm_table.py)
    cost_sources: dict[str, float] = field(default_factory=dict)  # share of the phase's time costed from each source


@dataclass
class MeasuredTables:
    """Nsight Compute measurements of one phase's top kernels."""

    phase: str
    launches: pl.DataFrame
    kernels: pl.DataFrame  # per profiled kernel: means, measured class
    classes: pl.DataFrame
    analytic_vs_measured: pl.DataFrame


@dataclass
class ReportTables:
    phases: pl.DataFrame
    steps: pl.DataFrame
    kernels: pl.DataFrame  # every kernel with costs and roofline columns
    labels: pl.DataFrame  # name → label, library, category, description
    ceilings: Ceilings | None = None
    missing_ceilings: list[MissingCeiling] = field(default_factory=list)  # roofs the run needs, the device lacks
    by_phase: dict[str, PhaseTables] = field(default_factory=dict)
    every_step: pl.DataFrame | None = None  # steps of every phase with step numbers, with what their marker says
    idle: IdleGaps | None = None  # the GPUs' idle gaps (runs with a device timeline)
    source_lines: pl.DataFrame | None = None  # traces with Python frames
    unattributed: pl.DataFrame | None = None
    measured: MeasuredTables | None = None
    accelerator: AcceleratorNeeds | None = None
    projection: WhatIf | None = None  # the what-if model on this run's own device (calibration, design options)
    generations: pl.DataFrame | None = None  # per image of runs with one generation per image
    communication: Communication | None = None  # runs with collective kernels
    critical_path: PathTables | None = None  # runs with a timeline
    ranks: pl.DataFrame | None = None  # runs of several ranks
    metrics: dict[str, Metric] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def per_phase(self, name: str) -> dict[str, pl.DataFrame]:
        """Phase → one of PhaseTables' tables, for the phases that have it."""
        return {phase: getattr(t, name) for phase, t in self.by_phase.items() if getattr(t, name) is not None}


def own_device_projection(run: Run, ceilings: Ceilings | None) -> WhatIf | None:
    """The run projected onto the device that measured it by the shipped what-if model: how well the model
    explains it, what each design option would buy, what latency goals need. GPU runs with costs only."""
    kernels = run.kernels
    if ceilings is None or not ceilings.bandwidth or not kernels.height:
        return None
    if (kernels["kind"] == "cpu_op").all() or kernels["bytes_moved"].is_null().all():
        return None
    model = default_model()
    source = target_from_ceilings(ceilings, model)
    inputs = projection_inputs(kernels, run.ncu, model)
    return what_if(inputs, source, source, model, Options(), source.l2_bytes, run.info, sweeps=[])


def report_kernels(run: Run, ceilings: Ceilings | None = None) -> pl.DataFrame:
    """The run's kernels as every report table reads them: with costs, names and their place on the roofline."""
    return place_on_roofline(with_costs_and_names(run).kernels, ceilings)


@dataclass
class RooflineTables:
    """One phase's kernels on the roofline: their points (named) and the per-kernel roofline table."""

    points: pl.DataFrame
    kernels: pl.DataFrame


def roofline_tables(kernels: pl.DataFrame, labels: pl.DataFrame, ceilings: Ceilings | None
                    ) -> dict[str, RooflineTables]:
    """Per phase, its roofline tables (none without ceilings). Made before the other report tables, so that the
    roofline figures can be drawn while those are computed."""
    if ceilings is None:
        return {}
    names = _label_columns(labels).select("name", "label")
    return {phase: _roofline_of(kernels.filter(pl.col("phase") == phase), names, ceilings)
            for phase in kernels["phase"].unique(maintain_order=True).to_list()}


def _roofline_of(subset: pl.DataFrame, names: pl.DataFrame, ceilings: Ceilings) -> RooflineTables:
    points = kernel_points(subset.with_columns(pl.col("category").fill_null("other")), "category")
    points = points.join(names, on="name", how="left", maintain_order="left")
    return RooflineTables(points=points, kernels=kernel_roofline_table(points, ceilings))


def projection_and_idle(run: Run, kernels: pl.DataFrame, labels: pl.DataFrame,
                        ceilings: Ceilings | None) -> tuple[WhatIf | None, IdleGaps | None]:
    """The run's own projection and its idle gaps: they need none of the other tables, so a caller may compute them
    meanwhile (report_tables' `beside`)."""
    return own_device_projection(run.with_kernels(kernels), ceilings), idle_gaps(kernels, labels)


def report_tables(run: Run, ceilings: Ceilings | None = None, kernels: pl.DataFrame | None = None,
                  labels: pl.DataFrame | None = None, roofline: dict[str, RooflineTables] | None = None,
                  phases: pl.DataFrame | None = None, critical: CriticalPath | None = None,
                  beside: Callable[[], tuple[WhatIf | None, IdleGaps | None]] | None = None) -> ReportTables:
    """kernels: report_kernels(run, ceilings), where the caller has it already (the run's own kernels are then not
    read: costs, names and roofline places are made once); labels (kernel_labels), roofline (roofline_tables),
    phases (phase_table of those kernels: the summary's) and critical (the run's critical paths, the summary's)
    likewise. beside: what projection_and_idle of these kernels returns, asked once the phase tables are made,
    where the caller computes it meanwhile (the report does, on a thread of its own: their Polars and NumPy work
    runs outside the GIL); computed here otherwise."""
    if kernels is None:
        run = with_costs_and_names(run)
        kernels = place_on_roofline(run.kernels, ceilings)
    phases = phase_table(kernels) if phases is None else phases
    labels = kernel_labels(kernels) if labels is None else labels
    roofline = roofline if roofline is not None else {}
    tables = ReportTables(phases=phases, steps=step_table(kernels), kernels=kernels, ceilings=ceilings,
                          missing_ceilings=missing_ceilings(kernels, ceilings), labels=labels, generations=generation_table(kernels, phases["phase"].to_list(), run.info))
    # A phase's rows are copied without the columns its tables never read (the decode phase of a big trace is most
    # of its rows).
    per_phase = kernels.drop(_NOT_PER_PHASE, strict=False)
    for phase in phases["phase"]:
        tables.by_phase[phase] = _phase_tables(run, per_phase, phase, phases, labels, ceilings, roofline.get(phase))
    tables.projection, tables.idle = (beside() if beside is not None
                                      else projection_and_idle(run, kernels, labels, ceilings))
    tables.every_step = _every_step(kernels, run)
    link = ceilings.spec.interconnect if ceilings is not None and ceilings.spec is not None else None
    tables.communication = communication(kernels, link.link_bandwidth if link else None, link.link if link else None,
                                         run.info.layer_types)
    parallel = run.info.parallel
    tables.ranks = with_waiting(rank_table(kernels, parallel.ranks if parallel is not None else None),
                                tables.communication.instances if tables.communication is not None else None)
    tables.critical_path = path_tables(run.with_kernels(kernels), critical)
    tables.source_lines = source_line_table(kernels, labels)
    tables.measured = _measured_tables(run, kernels, labels, ceilings)
    tables.accelerator = accelerator_needs(kernels, run.info, ceilings, tables.per_phase("categories"),
                                           run.info.layer_types)
    tables.metrics = compute_metrics(tables, run.info)
    tables.findings = evaluate(tables.metrics)
    missing = (kernels.select("phase", "module", *SUMMARY_INPUT_COLUMNS)  # narrow before the filter copies it
               .filter((pl.col("phase") == ranges.UNKNOWN) | pl.col("module").is_null()))
    tables.unattributed = (
        kernel_summary(missing).join(_label_columns(labels), on="name", how="left", maintain_order="left")
        if missing.height else None
    )
    return tables


# Kernel columns no table of a phase reads (ids that join a trace's events, launch details, collectives' messages:
# the run-wide tables read those).
_NOT_PER_PHASE = ("correlation", "external_id", "pid", "tid", "kernel_id", "launch_start_ns", "launch_api",
                  "msg_in_elems", "msg_out_elems", "msg_dtype", "group_size", "process_group", "collective",
                  "source_line", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_memory_bytes",
                  "description")


def _every_step(kernels: pl.DataFrame, run: Run) -> pl.DataFrame | None:
    """Steps of every phase, with the tokens and requests their annotation or embedding lookup gives."""
    steps = steps_of_every_phase(kernels)
    if steps.height == 0:
        return None
    described = run.info.attribution.steps if run.info.attribution is not None else []
    if not described:
        return steps
    notes = pl.DataFrame(
        [(s.phase, s.step, s.label, s.prefill_tokens, s.decode_tokens, s.tokens,
          _requests(s.prefill_requests, s.decode_requests, s.requests)) for s in described],
        schema={"phase": pl.String, "step": pl.Int64, "label": pl.String, "prefill_tokens": pl.Int64,
                "decode_tokens": pl.Int64, "tokens": pl.Int64, "requests": pl.Int64}, orient="row")
    return steps.join(notes, on=["phase", "step"], how="left", maintain_order="left")


def _requests(prefill: int | None, decode: int | None, either: int | None) -> int | None:
    return (prefill or 0) + (decode or 0) if prefill is not None or decode is not None else either


def _label_columns(labels: pl.DataFrame) -> pl.DataFrame:
    return labels.select("name", "label", "library", "category", "description")


def _phase_tables(run: Run, kernels: pl.DataFrame, phase: str, phases: pl.DataFrame, labels: pl.DataFrame,
                  ceilings: Ceilings | None, roofline: RooflineTables | None = None) -> PhaseTables:
    subset = kernels.filter(pl.col("phase") == phase)
    label_of = _label_columns(labels)
    names = label_of.select("name", "label")
    summary = kernel_summary(subset)
    mix = mix_tables(subset, ("category", "library"))
    tables = PhaseTables(
        kernels=summary.join(label_of, on="name", how="left", maintain_order="left"),
        cost_coverage=cost_coverage(subset),
        cost_sources=cost_sources(subset),
        catalog_coverage=catalog_coverage(subset),
        categories=mix["category"],
        libraries=mix["library"],
        longest=longest_launches(subset, 15, summary).join(label_of, on="name", how="left", maintain_order="left"),
    )
    unknown = (subset.select("library", "category", *SUMMARY_INPUT_COLUMNS)
               .filter((pl.col("library") == "unknown") | (pl.col("category") == "other")))
    if unknown.height:
        tables.unknown_kernels = kernel_summary(unknown).head(10)
    # Op groups need launch order or framework ops; kernel summaries (nsys stats imports) have neither.
    if has_timeline(kernels) or kernels["top_op_id"].is_not_null().any():
        tables.op_groups = op_group_table(subset, names)
    # Kernels outside every phase are left out of the breakdown, unless the trace marks no phase at all.
    if kernels["module"].is_not_null().any() and (phase != ranges.UNKNOWN or phases.height == 1):
        steps = {row["phase"]: row["steps"] for row in phases.iter_rows(named=True)}
        layer_types = run.info.layer_types_of(phase)
        breakdown = layer_breakdown(subset, layer_types, steps)
        tables.layer_breakdown = breakdown.drop("phase").join(label_of, on="name", how="left", maintain_order="left")
        tables.layer_types = layer_type_totals(breakdown).drop("phase")
        tables.per_layer = per_layer_times(subset, layer_types, steps).drop("phase")
    tables.gemm_shapes = gemm_shape_table(subset, ceilings)
    if ceilings is not None:
        tables.classes = class_table(subset)
        roofline = roofline if roofline is not None else _roofline_of(subset, names, ceilings)
        tables.roofline_points, tables.roofline_kernels = roofline.points, roofline.kernels
    return tables


def _measured_tables(run: Run, kernels: pl.DataFrame, labels: pl.DataFrame,
                     ceilings: Ceilings | None) -> MeasuredTables | None:
    if run.ncu is None or not run.ncu.height:
        return None
    phase = run.info.ncu.phase if run.info.ncu is not None else ranges.DECODE
    label_of = _label_columns(labels)
    by_kernel = measured_by_kernel(run.ncu, ceilings, classification_rule()["latency_ns"]).join(
        label_of, on="name", how="left", maintain_order="left")
    accuracy = analytic_vs_measured(by_kernel, kernels.filter(pl.col("phase") == phase)).join(
        label_of.select("name", "label"), on="name", how="left", maintain_order="left")
    return MeasuredTables(phase=phase, launches=run.ncu, kernels=by_kernel,
                          classes=measured_class_table(by_kernel), analytic_vs_measured=accuracy)
