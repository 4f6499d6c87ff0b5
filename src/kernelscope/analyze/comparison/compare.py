"""Runs side by side: setup, timings, device time per phase, layer → module → kernel, kernel mix, matched
kernels and what changed most. Pure tables; the first run is the baseline every ratio and delta refers to.

Kernels of different runs meet in one row when they do the same job (data/compare.toml): same phase, same
module within the layer (the root model's own modules by their name; without module ranges, the outermost
framework op) and the same coarse kind of work. Times are per step (a decode step, or the whole prefill) so
that runs with different numbers of steps compare; per-layer rows are per layer per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.compare_tables import (
    changes_table,
    layers_table,
    matched_table,
    mix_table,
    phases_table,
    setup_table,
    timings_table,
    workload_field,
)
from kernelscope.analyze.comparison.metrics import Difference
from kernelscope.analyze.comparison.run_views import RunView, compare_rules
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.structure.layers import OUTSIDE, with_layer_columns
from kernelscope.analyze.structure.phases import PHASE_ORDER, phase_table
from kernelscope.contracts.run import Run
from kernelscope.contracts.summary import Summary

ALIGNED_LAYER_TYPE = "decoder layer"


@dataclass(frozen=True)
class ComparedRun:
    """A run as the comparison lists it (compare.json "runs")."""

    label: str
    path: str
    model: str | None
    device: str | None
    dtype: str | None
    batch_size: int | None
    prompt_len: int | None
    new_tokens: int | None
    kernels: int

    @classmethod
    def of(cls, view: RunView, path: str) -> ComparedRun:
        info = view.run.info
        workload = info.workload
        return cls(label=view.label, path=path, model=workload.model if workload else None,
                   device=info.hardware.name, dtype=workload.dtype if workload else None,
                   batch_size=workload.batch_size if workload else None,
                   prompt_len=workload.prompt_len if workload else None,
                   new_tokens=workload.new_tokens if workload else None, kernels=view.summary.kernel_count)


@dataclass
class Note:
    """A statement about comparability; `key` names its words in the compare messages."""

    key: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    labels: list[str]
    setup: pl.DataFrame
    timings: pl.DataFrame
    phases: pl.DataFrame
    layers: pl.DataFrame
    matched: pl.DataFrame
    categories: pl.DataFrame
    libraries: pl.DataFrame
    changes: pl.DataFrame
    notes: list[Note]
    phase_names: list[str]
    # What makes the runs not like for like (model, device, dtype, batch, prompt): said before any number.
    differences: list[Difference] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)  # labels of runs whose repeats vary beyond the noisy limit

    cpu_runs: bool = False  # every run is CPU-only: CPU ops stand in for kernels, CPU time for device time

    @property
    def baseline(self) -> str:
        return self.labels[0]

    @property
    def compared_phases(self) -> list[str]:
        return compared_phases(self.phase_names)


def compared_phases(phase_names: list[str]) -> list[str]:
    """The phases compared kind of work by kind of work: every phase a run marks; the unknown one (time outside
    every phase range) only where no run marks any (traces of a single forward, or of a script without markers):
    each run's whole trace is then the one phase compared."""
    known = [p for p in phase_names if p != ranges.UNKNOWN]
    return known if known else [p for p in phase_names if p == ranges.UNKNOWN]


def prepare(label: str, run: Run, summary: Summary) -> RunView:
    run = with_costs_and_names(run)
    kernels = run.kernels
    phases = phase_table(kernels)
    steps = {row["phase"]: row["steps"] for row in phases.iter_rows(named=True)}
    groups = compare_rules()["category_groups"]
    kernels = with_layer_columns(kernels, run.info.layer_types).with_columns(
        pl.col("category").fill_null("other").replace(groups).alias("group"),
        pl.when(pl.col("module").is_not_null()).then(pl.col("layer_module"))
        .when(pl.col("top_op").is_not_null()).then(pl.format("op {}", pl.col("top_op")))
        .otherwise(pl.format("kernel {}", pl.col("friendly_name"))).alias("match_module"),
    )
    has_modules = bool(kernels["module"].is_not_null().any())
    per_step = {row["phase"]: row["device_time_per_step_ns"] for row in phases.iter_rows(named=True)}
    return RunView(label, run, summary, kernels, phases, steps, has_modules,
                   timing_estimates=metrics.timing_estimates(run.info),
                   step_estimates=metrics.step_estimates(run.kernels, per_step))


def compare(views: list[RunView]) -> Comparison:
    labels = [v.label for v in views]
    notes: list[Note] = []
    _align_layer_types(views, notes)
    # Model stages (in the order of the runs' phase tables: as they ran), then prefill, decode, unknown.
    stages = list(dict.fromkeys(p for v in views for p in v.steps if p not in PHASE_ORDER))
    phase_names = stages + [p for p in PHASE_ORDER if any(p in v.steps for v in views)]
    compared = compared_phases(phase_names)
    comparison = Comparison(
        labels=labels,
        setup=setup_table(views),
        timings=timings_table(views),
        phases=phases_table(views, phase_names),
        layers=layers_table(views, compared),
        matched=matched_table(views, compared),
        categories=mix_table(views, "category"),
        libraries=mix_table(views, "library"),
        changes=pl.DataFrame(),
        notes=notes,
        phase_names=phase_names,
    )
    comparison.changes = changes_table(comparison.matched, views, compared)
    notes.extend(comparability_notes(views, phase_names))
    comparison.differences = metrics.differences([v.run.info for v in views])
    comparison.noisy = [v.label for v in views if _noisy(v)]
    comparison.cpu_runs = all(v.summary.kind == "cpu" for v in views)
    return comparison


def _noisy(view: RunView) -> bool:
    """Whether a run's repeats vary beyond the noisy limit (summary.json `noise`, else from its own repeats)."""
    noise = view.summary.noise
    if not isinstance(noise, msgspec.UnsetType):
        return noise.noisy
    summary = metrics.noise_summary(view.run.info, view.run.kernels)
    return summary is not None and summary.noisy


# --- setup and timings -------------------------------------------------------------------------------------


# --- phases ---------------------------------------------------------------------------------------------------


# --- layer → module → kernel ----------------------------------------------------------------------------------


# --- matched kernels ------------------------------------------------------------------------------------------


# --- kernel mix -----------------------------------------------------------------------------------------------


# --- what changed most ----------------------------------------------------------------------------------------


# --- comparability --------------------------------------------------------------------------------------------


def _align_layer_types(views: list[RunView], notes: list[Note]) -> None:
    """Runs of different models name their decoder layers differently (Qwen2DecoderLayer, LlamaDecoderLayer).
    When every run has exactly one kind of layer, they are one kind here, so their modules meet; otherwise
    layer types are kept and only equal ones meet."""
    kinds = [set(v.kernels.filter(pl.col("layer").is_not_null())["layer_type"].unique().to_list()) for v in views]
    align = all(len(k) == 1 for k in kinds) and len(set.union(*kinds)) > 1
    aligned = pl.when(pl.col("layer_type") != OUTSIDE).then(pl.lit(ALIGNED_LAYER_TYPE)).otherwise(
        pl.col("layer_type")) if align else pl.col("layer_type")
    for v in views:
        v.kernels = v.kernels.with_columns(aligned.alias("aligned_layer_type"))
    if align:
        notes.append(Note("layer_types_aligned", {
            "types": ", ".join(f"{v.label}: {next(iter(k))}" for v, k in zip(views, kinds, strict=True))}))
    elif len({frozenset(k) for k in kinds if k}) > 1:
        notes.append(Note("layer_types_differ", {
            "types": "; ".join(f"{v.label}: {', '.join(sorted(k)) or '–'}" for v, k in zip(views, kinds, strict=True))}))


def comparability_notes(views: list[RunView], phase_names: list[str]) -> list[Note]:
    notes: list[Note] = []
    models = [workload_field("model")(v.run.info) for v in views]
    if len({m for m in models if m}) > 1:
        notes.append(Note("models_differ", {"models": ", ".join(f"{v.label}: {m}" for v, m in zip(views, models, strict=True))}))
    for phase in phase_names:
        if phase == ranges.UNKNOWN:
            continue
        lacking = [v.label for v in views if phase not in v.steps]
        if lacking:
            notes.append(Note("phase_missing", {"phase": phase, "runs": ", ".join(lacking)}))
    no_modules = [v.label for v in views if not v.has_modules]
    if no_modules:
        notes.append(Note("no_modules", {"runs": ", ".join(no_modules)}))
    unknown = [(v.label, v.phases.filter(pl.col("phase") == ranges.UNKNOWN)["time_pct"].sum()) for v in views]
    unknown = [(label, pct) for label, pct in unknown if pct and pct > 0.0]
    if compared_phases(phase_names) == [ranges.UNKNOWN]:
        notes.append(Note("whole_traces", {}))
    elif unknown:
        notes.append(Note("unknown_phase", {"runs": ", ".join(f"{label} ({pct:.1f}%)" for label, pct in unknown)}))
    decode_steps = [v.steps.get(ranges.DECODE) for v in views]
    if len({s for s in decode_steps if s}) > 1:
        notes.append(Note("steps_differ", {"steps": ", ".join(f"{v.label}: {s if s else '–'}" for v, s in zip(views, decode_steps, strict=True))}))
    for key in ("batch_size", "prompt_len"):
        values = [workload_field(key)(v.run.info) for v in views]
        if len({x for x in values if x is not None}) > 1:
            notes.append(Note(f"{key}_differs", {"settings": ", ".join(f"{v.label}: {x if x is not None else '–'}" for v, x in zip(views, values, strict=True))}))
    return notes


# --- side-by-side helpers -------------------------------------------------------------------------------------


