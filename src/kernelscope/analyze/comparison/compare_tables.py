"""The comparison's tables, the first run the baseline every ratio and delta refers to: setup, timings, device time per phase, layer → module → kernel per layer per step, matched kernels, kernel mix, and what changed most."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.compare_verdicts import verdict_columns
from kernelscope.analyze.comparison.run_views import RunView, col, compare_rules, delta_col, ratio_col
from kernelscope.analyze.hardware import amd_architecture
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.structure.layers import layer_breakdown
from kernelscope.analyze.structure.phases import PHASE_ORDER
from kernelscope.contracts.run_info import RunInfo


def workload_field(key: str) -> Callable[[RunInfo], Any]:
    return lambda info: getattr(info.workload, key) if info.workload is not None else None


def _model(key: str) -> Callable[[RunInfo], Any]:
    return lambda info: getattr(info.model, key) if info.model is not None else None


def _amd(info: RunInfo) -> str | None:
    """An AMD GPU's architecture (gfx94x): HIP's major.minor is no CUDA compute capability."""
    return amd_architecture(info.hardware.name, info.hardware.compute_capability, info.hardware.spec)


SETUP_ITEMS: list[tuple[str, Callable[[RunInfo], Any]]] = [
    # (item, how to read it from run.json)
    ("source", lambda info: info.source),
    ("backend", workload_field("backend")),
    ("model", workload_field("model")),
    ("model_type", _model("model_type")),
    ("parameters", _model("parameters")),
    ("num_layers", _model("num_layers")),
    ("dtype", workload_field("dtype")),
    ("batch_size", workload_field("batch_size")),
    ("prompt_len", workload_field("prompt_len")),
    ("new_tokens", workload_field("new_tokens")),
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
