"""Render a run's report (report/report.md and report/tables/*.csv) from its Profile and summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined

from kernelscope.analyze.hardware import Ceilings, classification_rule
from kernelscope.analyze.tables import ReportTables, report_tables
from kernelscope.load.profile import Profile
from kernelscope.report import figures
from kernelscope.report import formatting as fmt
from kernelscope.report.formatting import markdown_table

TOP_N = 20

KERNEL_COLUMNS: list[fmt.Column] = [
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Library", "library", fmt.plain),
    ("Category", "category", fmt.plain),
    ("Kernel", "label", fmt.plain),
    ("Total", "total_ns", fmt.duration),
    ("Instances", "instances", fmt.number),
    ("Avg", "avg_ns", fmt.duration),
    ("Med", "med_ns", fmt.duration),
    ("Min", "min_ns", fmt.duration),
    ("Max", "max_ns", fmt.duration),
    ("StdDev", "stddev_ns", fmt.duration),
]

UNKNOWN_COLUMNS: list[fmt.Column] = [
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Total", "total_ns", fmt.duration),
    ("Instances", "instances", fmt.number),
    ("Kernel (full name)", "name", fmt.code),
]

OP_GROUP_COLUMNS: list[fmt.Column] = [
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Op", "op", fmt.code),
    ("Kernels (launch order)", "kernels", fmt.plain),
    ("Instances", "instances", fmt.number),
    ("Per instance", "per_instance_ns", fmt.duration),
    ("Total", "total_ns", fmt.duration),
]

NAME_COLUMNS: list[fmt.Column] = [
    ("Kernel", "label", fmt.plain),
    ("Library", "library", fmt.plain),
    ("Category", "category", fmt.plain),
    ("Description", "description", fmt.plain),
    ("Full name", "name", fmt.code),
]
RIGHT = {"Per instance", "Share", "SM throughput", "DRAM throughput", "Memory throughput", "Achieved occupancy", "L1 hit rate",
         "L2 hit rate", "Duration", "SM", "DRAM", "Memory", "Occupancy", "L2 hit", "FLOP/B (measured)",
         "FLOPs analytic", "FLOPs measured", "ratio", "Bytes analytic", "DRAM bytes measured", "ratio ",
         "Launches", "Kernels", "Mean duration", "Mean % of compute roof", "Mean % of bandwidth roof",
         "Median intensity", "Mean est. occupancy", "Mean registers", "FLOP/B", "TFLOP/s", "GB/s",
         "% compute roof", "% bandwidth roof", "Time %", "Total", "Instances", "Avg", "Med", "Min", "Max", "StdDev", "Device time",
         "Per step", "Kernels / step", "Steps", "Span", "Per layer / step", "Launches / layer / step",
         "Layers", "Per step (all layers)"}

PHASE_COLUMNS: list[fmt.Column] = [
    ("Phase", "phase", fmt.plain),
    ("Kernels", "kernel_count", fmt.number),
    ("Device time", "device_time_ns", fmt.duration),
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Steps", "steps", fmt.number),
    ("Per step", "device_time_per_step_ns", fmt.duration),
    ("Kernels / step", "kernels_per_step", lambda v: fmt.number(v, 1)),
    ("Span", "span_ns", fmt.duration),
]

BREAKDOWN_COLUMNS: list[fmt.Column] = [
    ("Layer type", "layer_type", fmt.plain),
    ("Module", "layer_module", fmt.code),
    ("Kernel", "label", fmt.plain),
    ("Per layer / step", "per_layer_step_ns", fmt.duration),
    ("Launches / layer / step", "launches_per_layer_step", lambda v: fmt.number(v, 2)),
]

LAYER_TYPE_COLUMNS: list[fmt.Column] = [
    ("Layer type", "layer_type", fmt.plain),
    ("Layers", "layers", fmt.number),
    ("Per layer / step", "per_layer_step_ns", fmt.duration),
    ("Per step (all layers)", "per_step_ns", fmt.duration),
    ("Launches / layer / step", "launches_per_layer_step", lambda v: fmt.number(v, 1)),
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
]

CLASS_COLUMNS: list[fmt.Column] = [
    ("Class", "roofline_class", fmt.plain),
    ("Launches", "launches", fmt.number),
    ("Kernels", "kernels", fmt.number),
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Mean duration", "mean_duration_ns", fmt.duration),
    ("Mean % of compute roof", "mean_compute_roof_pct", lambda v: fmt.percent(v, 1)),
    ("Mean % of bandwidth roof", "mean_memory_roof_pct", lambda v: fmt.percent(v, 1)),
    ("Median intensity", "median_arithmetic_intensity", lambda v: fmt.number(v, 2)),
    ("Mean est. occupancy", "mean_est_occupancy_pct", lambda v: fmt.percent(v, 0)),
    ("Mean registers", "mean_registers_per_thread", lambda v: fmt.number(v, 0)),
]

ROOFLINE_COLUMNS: list[fmt.Column] = [
    ("Kernel", "label", fmt.plain),
    ("Total", "dur_ns", fmt.duration),
    ("Precision", "precision", fmt.plain),
    ("FLOP/B", "intensity", lambda v: fmt.number(v, 2)),
    ("TFLOP/s", "flops_per_s", lambda v: fmt.number(None if v is None else v / 1e12, 2)),
    ("GB/s", "bytes_per_s", lambda v: fmt.number(None if v is None else v / 1e9, 0)),
    ("% compute roof", "compute_roof_pct", lambda v: fmt.percent(v, 1)),
    ("% bandwidth roof", "memory_roof_pct", lambda v: fmt.percent(v, 1)),
    ("Class", "roofline_class", fmt.plain),
]

MEASURED_CLASS_COLUMNS: list[fmt.Column] = [
    ("Class", "measured_class", fmt.plain),
    ("Kernels", "kernels", fmt.number),
    ("Share", "share_pct", lambda v: fmt.percent(v, 1)),
    ("SM throughput", "sm_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("DRAM throughput", "dram_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("Memory throughput", "mem_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("Achieved occupancy", "achieved_occupancy_pct", lambda v: fmt.percent(v, 1)),
    ("L1 hit rate", "l1_hit_rate_pct", lambda v: fmt.percent(v, 1)),
    ("L2 hit rate", "l2_hit_rate_pct", lambda v: fmt.percent(v, 1)),
    ("Mean duration", "duration_us", lambda v: fmt.duration(None if v is None else v * 1e3)),
]

MEASURED_KERNEL_COLUMNS: list[fmt.Column] = [
    ("Kernel", "label", fmt.plain),
    ("Launches", "profiled_launches", fmt.number),
    ("Duration", "duration_us", lambda v: fmt.duration(None if v is None else v * 1e3)),
    ("SM", "sm_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("DRAM", "dram_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("Memory", "mem_throughput_pct", lambda v: fmt.percent(v, 1)),
    ("Occupancy", "achieved_occupancy_pct", lambda v: fmt.percent(v, 1)),
    ("L2 hit", "l2_hit_rate_pct", lambda v: fmt.percent(v, 1)),
    ("FLOP/B (measured)", "measured_intensity", lambda v: fmt.number(v, 2)),
    ("Class", "measured_class", fmt.plain),
]

ACCURACY_COLUMNS: list[fmt.Column] = [
    ("Kernel", "label", fmt.plain),
    ("FLOPs analytic", "analytic_flops", lambda v: fmt.number(v, 0)),
    ("FLOPs measured", "flops", lambda v: fmt.number(v, 0)),
    ("ratio", "flops_ratio", lambda v: fmt.number(v, 3)),
    ("Bytes analytic", "analytic_bytes", lambda v: fmt.number(v, 0)),
    ("DRAM bytes measured", "dram_bytes", lambda v: fmt.number(v, 0)),
    ("ratio ", "bytes_ratio", lambda v: fmt.number(v, 3)),
]

PER_LAYER_COLUMNS: list[fmt.Column] = [
    ("Layer", "layer", fmt.number),
    ("Layer type", "layer_type", fmt.plain),
    ("Per step", "per_step_ns", fmt.duration),
    ("Launches", "launches", fmt.number),
]


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("kernelscope.report", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=fmt.duration, ms=fmt.ms, percent=fmt.percent, ratio=fmt.ratio_percent,
        number=fmt.number, gb=fmt.gigabytes, code=fmt.code,
    )
    env.globals["layer_type_counts"] = _layer_type_counts
    return env


def _layer_type_counts(model: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for label in (model.get("layer_types") or {}).values():
        counts[label] = counts.get(label, 0) + 1
    return counts


def render_report(
    profile: Profile, summary: dict[str, Any], out_dir: Path, top_n: int = TOP_N, ceilings: Ceilings | None = None
) -> list[Path]:
    """Writes report.md, figures/ and tables/*.csv into out_dir (created). Returns the files written."""
    tables = report_tables(profile, ceilings)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = _write_csvs(tables, out_dir / "tables")
    figure_paths = _draw_figures(tables, out_dir / "figures", profile.run)
    written += [p for paths in figure_paths.values() for p in paths]
    context = _context(profile, summary, tables, top_n)
    context["figures"] = {key: f"figures/{paths[0].name}" for key, paths in figure_paths.items() if paths}
    text = _env().get_template("report.en.md.j2").render(**context)
    path = out_dir / "report.md"
    path.write_text(text, encoding="utf-8")
    return [path, *written]


def _context(profile: Profile, summary: dict[str, Any], tables: ReportTables, top_n: int) -> dict[str, Any]:
    run = profile.run
    kernel_tables = {}
    for phase, df in tables.kernels_by_phase.items():
        top = df.head(top_n)
        rest = df.slice(top_n)
        kernel_tables[phase] = {
            "table": markdown_table(top, KERNEL_COLUMNS, RIGHT),
            "shown": top.height,
            "total": df.height,
            "rest_pct": float(rest["time_pct"].sum()) if rest.height else 0.0,
        }
    breakdowns = {
        phase: {
            "types": markdown_table(tables.layer_types[phase], LAYER_TYPE_COLUMNS, RIGHT),
            "modules": markdown_table(df, BREAKDOWN_COLUMNS, RIGHT),
            "per_layer": markdown_table(tables.per_layer[phase], PER_LAYER_COLUMNS, RIGHT),
        }
        for phase, df in tables.layer_breakdown.items()
    }
    roofline = {}
    for phase, classes in tables.classes.items():
        roofline[phase] = {
            "classes": markdown_table(classes, CLASS_COLUMNS, RIGHT),
            "kernels": markdown_table(tables.roofline_kernels[phase].head(top_n), ROOFLINE_COLUMNS, RIGHT),
        }
    unattributed = None
    if tables.unattributed is not None:
        unattributed = markdown_table(tables.unattributed.head(10), KERNEL_COLUMNS, RIGHT)
    catalog = {
        phase: {
            "coverage": tables.catalog_coverage[phase],
            "unknown": markdown_table(tables.unknown_kernels[phase], UNKNOWN_COLUMNS, RIGHT)
            if phase in tables.unknown_kernels else None,
        }
        for phase in tables.catalog_coverage
    }
    op_groups = {
        phase: markdown_table(df.head(top_n), OP_GROUP_COLUMNS, RIGHT) for phase, df in tables.op_groups.items()
    }
    shown = set()
    for df in tables.kernels_by_phase.values():
        shown |= set(df.head(top_n)["name"].to_list())
    appendix = markdown_table(tables.labels.filter(pl.col("name").is_in(list(shown))), NAME_COLUMNS)
    return {
        "run": run,
        "summary": summary,
        "workload": run.get("workload") or {},
        "hardware": run.get("hardware") or {},
        "software": run.get("software") or {},
        "model": run.get("model") or {},
        "capture": run.get("capture") or {},
        "timings": run.get("timings") or {},
        "trace": run.get("trace") or {},
        "phase_table": markdown_table(tables.phases, PHASE_COLUMNS, RIGHT),
        "kernel_tables": kernel_tables,
        "breakdowns": breakdowns,
        "unattributed": unattributed,
        "catalog": catalog,
        "op_groups": op_groups,
        "appendix": appendix,
        "roofline": roofline,
        "measured": _measured_context(tables, top_n),
        "ceilings": tables.ceilings,
        "cost_coverage": tables.cost_coverage,
        "rule": classification_rule(),
        "config_rows": _config_rows(run.get("model") or {}),
        "top_n": top_n,
    }


CONFIG_KEYS = [
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "rms_norm_eps",
    "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
    "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
]


def _config_rows(model: dict[str, Any]) -> list[tuple[str, Any]]:
    config = model.get("config") or {}
    return [(key, config[key]) for key in CONFIG_KEYS if config.get(key) is not None]


def _write_csvs(tables: ReportTables, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    frames: dict[str, pl.DataFrame] = {"phases": tables.phases, "decode_steps": tables.steps}
    for phase, df in tables.kernels_by_phase.items():
        frames[f"kernels_{phase}"] = df
    for phase, df in tables.op_groups.items():
        frames[f"op_groups_{phase}"] = df
    if tables.labels is not None:
        frames["kernel_names"] = tables.labels
    for phase, df in tables.layer_breakdown.items():
        frames[f"layer_breakdown_{phase}"] = df
        frames[f"layer_types_{phase}"] = tables.layer_types[phase]
        frames[f"per_layer_{phase}"] = tables.per_layer[phase]
    for phase, df in tables.classes.items():
        frames[f"roofline_classes_{phase}"] = df
        frames[f"roofline_kernels_{phase}"] = tables.roofline_kernels[phase]
    if tables.measured_kernels is not None:
        frames["ncu_kernels"] = tables.measured_kernels
        frames["ncu_classes"] = tables.measured_classes
        frames["ncu_vs_analytic"] = tables.analytic_vs_measured
    if tables.unattributed is not None:
        frames["unattributed_kernels"] = tables.unattributed
    paths = []
    for name, df in frames.items():
        path = directory / f"{name}.csv"
        df.write_csv(path)
        paths.append(path)
    return paths


def _measured_context(tables: ReportTables, top_n: int) -> dict[str, Any] | None:
    if tables.measured_kernels is None:
        return None
    kernels = tables.measured_kernels
    accuracy = tables.analytic_vs_measured
    return {
        "phase": tables.measured_phase,
        "count": kernels.height,
        "classes": markdown_table(tables.measured_classes, MEASURED_CLASS_COLUMNS, RIGHT),
        "kernels": markdown_table(kernels.head(top_n), MEASURED_KERNEL_COLUMNS, RIGHT),
        "accuracy": markdown_table(accuracy.head(top_n), ACCURACY_COLUMNS, RIGHT),
    }


def _draw_figures(tables: ReportTables, directory: Path, run: dict[str, Any]) -> dict[str, list[Path]]:
    """Roofline charts and histograms per phase when the device has ceilings; Nsight Compute figures when
    measurements exist."""
    out: dict[str, list[Path]] = {}
    ceilings = tables.ceilings
    device = (run.get("hardware") or {}).get("name") or (ceilings.device if ceilings else "")
    for phase, points in tables.roofline_points.items():
        if points.height == 0 or ceilings is None:
            continue
        subset = tables.kernels.filter(pl.col("phase") == phase)
        label = f"{phase} on {device}"
        out[f"roofline_{phase}"] = figures.roofline_physical(points, ceilings, f"Roofline: {label}", directory,
                                                             f"roofline_{phase}")
        out[f"roofline_normalized_{phase}"] = figures.roofline_normalized(
            points, ceilings, f"Normalized roofline: {label}", directory, f"roofline_normalized_{phase}")
        out[f"roofline_top_{phase}"] = figures.per_kernel_rooflines(
            points, ceilings, f"Top kernels on their roofs: {label}", directory, f"roofline_top_{phase}")
        out[f"histograms_{phase}"] = figures.histograms(subset, f"Per-launch metrics: {label}", directory,
                                                        f"histograms_{phase}")
    if tables.measured_kernels is not None and tables.measured_kernels.height:
        phase = tables.measured_phase
        out["ncu_histograms"] = figures.measured_histograms(
            tables.ncu_launches, f"Nsight Compute metrics per profiled launch ({phase})", directory, "ncu_histograms")
        if ceilings is not None:
            out["ncu_roofline"] = figures.measured_roofline(
                tables.measured_kernels, ceilings,
                f"Measured roofline: {phase} on {device}", directory, "ncu_roofline")
    return out
