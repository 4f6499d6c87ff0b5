"""Render a run's report (report/report.md and report/tables/*.csv) from its Profile and summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined

from kernelscope.analyze.tables import ReportTables, report_tables
from kernelscope.load.profile import Profile
from kernelscope.report import formatting as fmt
from kernelscope.report.formatting import markdown_table

TOP_N = 20

KERNEL_COLUMNS: list[fmt.Column] = [
    ("Time %", "time_pct", lambda v: fmt.percent(v, 1)),
    ("Total", "total_ns", fmt.duration),
    ("Instances", "instances", fmt.number),
    ("Avg", "avg_ns", fmt.duration),
    ("Med", "med_ns", fmt.duration),
    ("Min", "min_ns", fmt.duration),
    ("Max", "max_ns", fmt.duration),
    ("StdDev", "stddev_ns", fmt.duration),
    ("Kernel", "name", fmt.code),
]
RIGHT = {"Time %", "Total", "Instances", "Avg", "Med", "Min", "Max", "StdDev", "Kernels", "Device time",
         "Per step", "Kernels / step", "Steps", "Span", "Per layer / step", "Launches / layer / step",
         "Layers", "Per step (all layers)", "Launches"}

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
    ("Kernel", "name", fmt.code),
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


def render_report(profile: Profile, summary: dict[str, Any], out_dir: Path, top_n: int = TOP_N) -> list[Path]:
    """Writes report.md and tables/*.csv into out_dir (created). Returns the files written."""
    tables = report_tables(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = _write_csvs(tables, out_dir / "tables")
    context = _context(profile, summary, tables, top_n)
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
    unattributed = None
    if tables.unattributed is not None:
        unattributed = markdown_table(tables.unattributed.head(10), KERNEL_COLUMNS, RIGHT)
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
    for phase, df in tables.layer_breakdown.items():
        frames[f"layer_breakdown_{phase}"] = df
        frames[f"layer_types_{phase}"] = tables.layer_types[phase]
        frames[f"per_layer_{phase}"] = tables.per_layer[phase]
    if tables.unattributed is not None:
        frames["unattributed_kernels"] = tables.unattributed
    paths = []
    for name, df in frames.items():
        path = directory / f"{name}.csv"
        df.write_csv(path)
        paths.append(path)
    return paths
