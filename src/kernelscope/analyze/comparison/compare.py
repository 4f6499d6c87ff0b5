"""Runs side by side: setup, timings, device time per phase, layer → module → kernel, kernel mix, matched
kernels and what changed most. Pure tables; the first run is the baseline every ratio and delta refers to.

Kernels of different runs meet in one row when they do the same job (data/compare.toml): same phase, same
module within the layer (the root model's own modules by their name; without module ranges, the outermost
framework op) and the same coarse kind of work. Times are per step (a decode step, or the whole prefill) so
that runs with different numbers of steps compare; per-layer rows are per layer per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.compare_verdicts import verdict_columns
from kernelscope.analyze.comparison.metrics import Difference, Estimate
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.hardware import amd_architecture
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.structure.layers import OUTSIDE, layer_breakdown, with_layer_columns
from kernelscope.analyze.structure.phases import PHASE_ORDER, phase_table
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.load import knowledge

ALIGNED_LAYER_TYPE = "decoder layer"


def compare_rules() -> dict[str, Any]:
    return knowledge.compare_rules()


@dataclass
class RunView:
    """One run prepared for comparison: its kernels with catalog, layer and matching columns."""

    label: str
    run: Run
    summary: Summary
    kernels: pl.DataFrame
    phases: pl.DataFrame
    steps: dict[str, int]
    has_modules: bool
    timing_estimates: dict[str, Estimate] = field(default_factory=dict)  # analyze/comparison/metrics: the one definition
    step_estimates: dict[str, Estimate] = field(default_factory=dict)  # per phase: mean device time per step


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


def col(metric: str, label: str) -> str:
    """Name of a per-run column: per_step_ns[h200]."""
    return f"{metric}[{label}]"


def ratio_col(label: str, base: str) -> str:
    return f"ratio[{label}/{base}]"


def delta_col(label: str, base: str) -> str:
    return f"delta_ns[{label}-{base}]"


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

def _workload(key: str) -> Callable[[RunInfo], Any]:
    return lambda info: getattr(info.workload, key) if info.workload is not None else None


def _model(key: str) -> Callable[[RunInfo], Any]:
    return lambda info: getattr(info.model, key) if info.model is not None else None


def _amd(info: RunInfo) -> str | None:
    """An AMD GPU's architecture (gfx94x): HIP's major.minor is no CUDA compute capability."""
    return amd_architecture(info.hardware.name, info.hardware.compute_capability, info.hardware.spec)


SETUP_ITEMS: list[tuple[str, Callable[[RunInfo], Any]]] = [
    # (item, how to read it from run.json)
    ("source", lambda info: info.source),
    ("backend", _workload("backend")),
    ("model", _workload("model")),
    ("model_type", _model("model_type")),
    ("parameters", _model("parameters")),
    ("num_layers", _model("num_layers")),
    ("dtype", _workload("dtype")),
    ("batch_size", _workload("batch_size")),
    ("prompt_len", _workload("prompt_len")),
    ("new_tokens", _workload("new_tokens")),
    ("device", lambda info: info.hardware.name),
    ("device_count", lambda info: info.hardware.count),
    ("sm_count", lambda info: info.hardware.sm_count),
    ("compute_capability", lambda info: None if _amd(info) else info.hardware.compute_capability),
    ("architecture", _amd),
    ("memory_bytes", lambda info: info.hardware.memory_bytes),
    ("driver_version", lambda info: info.hardware.driver_version),
    ("torch", lambda info: info.software.torch),
    ("cuda", lambda info: info.software.cuda),
    ("transformers", lambda info: info.software.transformers),
    ("kernelscope", lambda info: info.software.kernelscope),
    ("created", lambda info: info.created),
]


def setup_table(views: list[RunView]) -> pl.DataFrame:
    """item, one text column per run, and whether the runs differ in it. Items no run has are left out."""
    rows = []
    for item, read in SETUP_ITEMS:
        values = []
        for v in views:
            value = read(v.run.info)
            values.append(None if value is None else str(value))
        if all(x is None for x in values):
            continue
        rows.append({"item": item, **{col("value", v.label): x for v, x in zip(views, values, strict=True)},
                     "differs": len(set(values)) > 1})
    schema = {"item": pl.String, **{col("value", v.label): pl.String for v in views}, "differs": pl.Boolean}
    return pl.DataFrame(rows, schema=schema, orient="row")


TIMING_METRICS = [
    # (metric, where, key): unprofiled timings of run.json, or key figures of summary.json
    ("ttft_ms", "timings", "ttft_ms"),
    ("tpot_ms", "timings", "tpot_ms"),
    ("tokens_per_s", "timings", "tokens_per_s"),
    ("decode_tokens_per_s", "timings", "decode_tokens_per_s"),
    ("e2e_ms", "timings", "e2e_ms"),
    ("device_time_ms", "summary", "device_time_us"),
    ("kernel_count", "summary", "kernel_count"),
    ("attribution_coverage", "summary", "attribution_coverage"),
]


def timings_table(views: list[RunView]) -> pl.DataFrame:
    """metric, one value per run (null: not available), ratio of each run to the baseline, and the verdict on
    that change (analyze/comparison/metrics.py: held to the floor or the noise of the metric's own repeats in either run)."""
    rows = []
    for metric, where, key in TIMING_METRICS:
        values: list[float | None] = []
        for v in views:
            if where == "timings":
                value = getattr(v.run.info.plain_timings, key)
            else:
                value = getattr(v.summary, key)
                if key == "device_time_us":  # CPU runs: their CPU ops' time plays the device's part
                    value = v.summary.cpu_time_us if v.summary.kind == "cpu" else value
                    value = value / 1e3 if value is not None else None
            values.append(None if value is None else float(value))
        rows.append({"metric": metric, **{col("value", v.label): x for v, x in zip(views, values, strict=True)}})
    table = pl.DataFrame(rows, schema={"metric": pl.String, **{col("value", v.label): pl.Float64 for v in views}},
                         orient="row")
    base = views[0]
    verdicts = {v.label: [metrics.judge(base.timing_estimates[m], v.timing_estimates[m])
                          if m in base.timing_estimates else None for m, _, _ in TIMING_METRICS]
                for v in views[1:]}
    return _with_ratios(verdict_columns(table, views[0].label, verdicts), [v.label for v in views], "value")


# --- phases ---------------------------------------------------------------------------------------------------

PHASE_METRICS = ["device_time_ns", "steps", "device_time_per_step_ns", "kernels_per_step", "busy_pct", "median_launch_ns"]


def phases_table(views: list[RunView], phase_names: list[str]) -> pl.DataFrame:
    """Per phase and run: device time, steps, per step, kernels per step, GPU busy share, median launch call;
    per-step ratios. (Runs made before launch calls had a median show none.)"""
    parts = [v.phases.select("phase", *(c if c in v.phases.columns else pl.lit(None, dtype=pl.Float64).alias(c)
                                         for c in PHASE_METRICS)) for v in views]
    keys = pl.DataFrame({"phase": phase_names}, schema={"phase": pl.String})
    table = _side_by_side(keys, ["phase"], parts, [v.label for v in views], PHASE_METRICS)
    table = _with_ratios(table, [v.label for v in views], "device_time_per_step_ns")
    table = _with_deltas(table, [v.label for v in views], "device_time_per_step_ns")
    # The verdict on each run's mean device time per step against the baseline's (analyze/comparison/metrics.py).
    base = views[0].step_estimates
    verdicts = {v.label: [metrics.judge(base[p], v.step_estimates[p])
                          if p in base and p in v.step_estimates else None for p in table["phase"].to_list()]
                for v in views[1:]}
    return verdict_columns(table, views[0].label, verdicts)


# --- layer → module → kernel ----------------------------------------------------------------------------------

LAYER_KEYS = ["phase", "layer_type", "layer_module", "group"]


def layers_table(views: list[RunView], phases: list[str]) -> pl.DataFrame:
    """Seed 002's shape: per phase (of `phases`, compared_phases), layer type, module within the layer and kind of
    work, the kernels each run launches for it and its time per layer per step, side by side."""
    parts = [_run_layers(v, phases) for v in views]
    labels = [v.label for v in views]
    keys = _ordered_keys(parts, LAYER_KEYS)
    table = _side_by_side(keys, LAYER_KEYS, parts, labels, ["kernels", "per_layer_step_ns", "launches_per_layer_step"])
    table = _zero_where_phase_ran(table, views, ["per_layer_step_ns", "launches_per_layer_step"])
    return _with_deltas(_with_ratios(table, labels, "per_layer_step_ns"), labels, "per_layer_step_ns")


def _run_layers(v: RunView, phases: list[str]) -> pl.DataFrame:
    empty = pl.DataFrame(schema={**dict.fromkeys(LAYER_KEYS, pl.String), "kernels": pl.String,
                                 "per_layer_step_ns": pl.Float64, "launches_per_layer_step": pl.Float64})
    known = v.kernels.filter(pl.col("phase").is_in(phases) & pl.col("module").is_not_null())
    if not known.height:
        return empty
    added = ["layer_type", "layer_module", "aligned_layer_type", "group", "match_module"]
    breakdown = layer_breakdown(known.drop(added), v.run.info.layer_types, v.steps)
    groups = known.group_by("name").agg(pl.col("group").first(), pl.col("friendly_name").first())
    aligned = v.kernels.select("layer_type", "aligned_layer_type").unique("layer_type")
    rows = (
        breakdown.join(groups, on="name", how="left", maintain_order="left")
        .join(aligned, on="layer_type", how="left", maintain_order="left")
        .with_columns(pl.col("aligned_layer_type").alias("layer_type"))
        .group_by(LAYER_KEYS, maintain_order=True)
        .agg(
            pl.col("friendly_name").unique(maintain_order=True).str.join(", ").alias("kernels"),
            pl.col("per_layer_step_ns").sum(),
            pl.col("launches_per_layer_step").sum().cast(pl.Float64),
        )
    )
    return rows.select(empty.columns)


# --- matched kernels ------------------------------------------------------------------------------------------

MATCH_KEYS = ["phase", "match_module", "group"]


def matched_table(views: list[RunView], phases: list[str]) -> pl.DataFrame:
    """Kernels matched across runs by what they do (module within the layer + kind of work), all layers
    together, per phase of `phases` (compared_phases): per step time, launches per step, kernel names and framework ops of each run; ratio and delta
    against the baseline. Sorted by the largest per-step time of any run."""
    labels = [v.label for v in views]
    parts = [_run_matched(v, phases) for v in views]
    keys = _ordered_keys(parts, MATCH_KEYS)
    table = _side_by_side(keys, MATCH_KEYS, parts, labels, ["kernels", "ops", "per_step_ns", "launches_per_step"])
    table = _zero_where_phase_ran(table, views, ["per_step_ns", "launches_per_step"])
    table = _with_deltas(_with_ratios(table, labels, "per_step_ns"), labels, "per_step_ns")
    largest = pl.max_horizontal([pl.col(col("per_step_ns", label)) for label in labels])
    return table.with_columns(largest.alias("_largest")).sort(  # ties keep the keys' order
        "_largest", descending=True, nulls_last=True, maintain_order=True).drop("_largest")


def _run_matched(v: RunView, phases: list[str]) -> pl.DataFrame:
    known = v.kernels.filter(pl.col("phase").is_in(phases))
    steps = pl.DataFrame({"phase": list(v.steps), "steps": list(v.steps.values())},
                         schema={"phase": pl.String, "steps": pl.Int64})
    return (
        known.sort("start_ns")
        .group_by(MATCH_KEYS, maintain_order=True)
        .agg(
            pl.col("friendly_name").unique(maintain_order=True).str.join(", ").alias("kernels"),
            pl.col("top_op").drop_nulls().unique(maintain_order=True).str.join(", ").alias("ops"),
            pl.col("dur_ns").sum().alias("total_ns"),
            launch_count().alias("launches"),
        )
        .join(steps, on="phase", how="left")
        .with_columns(
            (pl.col("total_ns") / pl.col("steps")).alias("per_step_ns"),
            (pl.col("launches") / pl.col("steps")).cast(pl.Float64).alias("launches_per_step"),
            pl.when(pl.col("ops") == "").then(None).otherwise(pl.col("ops")).alias("ops"),
        )
        .select(*MATCH_KEYS, "kernels", "ops", "per_step_ns", "launches_per_step")
    )


# --- kernel mix -----------------------------------------------------------------------------------------------


def mix_table(views: list[RunView], column: str) -> pl.DataFrame:
    """Per phase and category (or library): time per step and share of the phase for each run."""
    labels = [v.label for v in views]
    parts = []
    for v in views:
        steps = pl.DataFrame({"phase": list(v.steps), "steps": list(v.steps.values())},
                             schema={"phase": pl.String, "steps": pl.Int64})
        parts.append(
            v.kernels.with_columns(pl.col(column).fill_null("unknown"))
            .group_by("phase", column)
            .agg(pl.col("dur_ns").sum().alias("total_ns"))
            .join(steps, on="phase", how="left")
            .with_columns(
                (pl.col("total_ns") / pl.col("steps")).alias("per_step_ns"),
                (100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over("phase")).alias("time_pct"),
            )
            .sort(["phase", "total_ns", column], descending=[False, True, False], nulls_last=True)
            .select("phase", column, "per_step_ns", "time_pct")
        )
    keys = _ordered_keys(parts, ["phase", column])
    table = _side_by_side(keys, ["phase", column], parts, labels, ["per_step_ns", "time_pct"])
    table = _zero_where_phase_ran(table, views, ["per_step_ns", "time_pct"])
    table = _with_deltas(_with_ratios(table, labels, "per_step_ns"), labels, "per_step_ns")
    largest = pl.max_horizontal([pl.col(col("per_step_ns", label)) for label in labels])
    return table.with_columns(largest.alias("_largest")).sort(
        [_phase_rank(), "_largest"], descending=[False, True], nulls_last=True, maintain_order=True).drop("_largest")


# --- what changed most ----------------------------------------------------------------------------------------


def changes_table(matched: pl.DataFrame, views: list[RunView], phases: list[str]) -> pl.DataFrame:
    """Per phase and compared run, the matched rows whose per-step time changed most against the baseline
    (largest absolute delta), with the share of the phase's whole per-step change each explains; `phases`: the
    compared ones (compared_phases), as for the matched and layer tables."""
    rules = compare_rules()["changes"]
    base = views[0].label
    schema = {"phase": pl.String, "run": pl.String, "match_module": pl.String, "group": pl.String,
              "kernels_base": pl.String, "kernels_run": pl.String, "base_ns": pl.Float64, "run_ns": pl.Float64,
              "delta_ns": pl.Float64, "ratio": pl.Float64, "share_of_change_pct": pl.Float64}
    rows = []
    for v in views[1:]:
        for phase in v.steps:
            if phase not in phases or phase not in views[0].steps:
                continue
            subset = matched.filter(pl.col("phase") == phase)
            base_total = float(subset[col("per_step_ns", base)].fill_null(0).sum())
            run_total = float(subset[col("per_step_ns", v.label)].fill_null(0).sum())
            change = run_total - base_total
            floor = rules["min_share_pct"] / 100.0 * base_total
            ranked = subset.with_columns(pl.col(delta_col(v.label, base)).abs().alias("_abs")).filter(
                pl.col("_abs") >= floor).sort(["_abs", "match_module", "group"], descending=[True, False, False],
                                              nulls_last=True).head(rules["top"])
            for row in ranked.iter_rows(named=True):
                delta = row[delta_col(v.label, base)]
                rows.append({
                    "phase": phase, "run": v.label, "match_module": row["match_module"], "group": row["group"],
                    "kernels_base": row[col("kernels", base)], "kernels_run": row[col("kernels", v.label)],
                    "base_ns": row[col("per_step_ns", base)], "run_ns": row[col("per_step_ns", v.label)],
                    "delta_ns": delta, "ratio": row[ratio_col(v.label, base)],
                    "share_of_change_pct": 100.0 * delta / change if change else None,
                })
    return pl.DataFrame(rows, schema=schema, orient="row")


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
    models = [_workload("model")(v.run.info) for v in views]
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
        values = [_workload(key)(v.run.info) for v in views]
        if len({x for x in values if x is not None}) > 1:
            notes.append(Note(f"{key}_differs", {"settings": ", ".join(f"{v.label}: {x if x is not None else '–'}" for v, x in zip(views, values, strict=True))}))
    return notes


# --- side-by-side helpers -------------------------------------------------------------------------------------


def _ordered_keys(parts: list[pl.DataFrame], keys: list[str]) -> pl.DataFrame:
    """Every key of any run once: the baseline's rows in its order, then other runs' new rows in theirs."""
    frames = [p.select(keys).with_columns(pl.lit(i).alias("_run"), pl.int_range(pl.len()).alias("_row"))
              for i, p in enumerate(parts)]
    stacked = pl.concat(frames, how="vertical_relaxed")
    first = stacked.unique(keys, keep="first", maintain_order=True)
    return first.sort(_phase_rank(), "_run", "_row").select(keys)


def _phase_rank() -> pl.Expr:
    rank = {name: i for i, name in enumerate(PHASE_ORDER)}
    return pl.col("phase").replace_strict(rank, default=-1, return_dtype=pl.Int64)  # model stages first


def _side_by_side(keys: pl.DataFrame, on: list[str], parts: list[pl.DataFrame], labels: list[str],
                  metrics: list[str]) -> pl.DataFrame:
    table = keys
    for label, part in zip(labels, parts, strict=True):
        renamed = part.select(*on, *(pl.col(m).alias(col(m, label)) for m in metrics))
        table = table.join(renamed, on=on, how="left", maintain_order="left", nulls_equal=True)
    ordered = [col(m, label) for m in metrics for label in labels]
    return table.select(*on, *ordered)


def _zero_where_phase_ran(table: pl.DataFrame, views: list[RunView], metrics: list[str]) -> pl.DataFrame:
    """A row a run lacks in a phase it ran took no time there (0); in a phase it did not run, it is unknown."""
    exprs = []
    for v in views:
        ran = pl.col("phase").is_in(list(v.steps))
        for m in metrics:
            name = col(m, v.label)
            exprs.append(pl.when(ran).then(pl.col(name).fill_null(0)).otherwise(pl.col(name)).alias(name))
    return table.with_columns(exprs)


def _with_ratios(table: pl.DataFrame, labels: list[str], metric: str) -> pl.DataFrame:
    base = pl.col(col(metric, labels[0]))
    return table.with_columns(
        pl.when(base != 0).then(pl.col(col(metric, label)) / base).otherwise(None).alias(ratio_col(label, labels[0]))
        for label in labels[1:]
    )


def _with_deltas(table: pl.DataFrame, labels: list[str], metric: str) -> pl.DataFrame:
    base = pl.col(col(metric, labels[0]))
    return table.with_columns(
        (pl.col(col(metric, label)) - base).alias(delta_col(label, labels[0])) for label in labels[1:]
    )
