"""The columns of every report table: header key (its words are in messages/<lang>.toml), column and
formatter. Numbers are formatted the same in every language; `term` cells are translated."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from kernelscope.report import formatting as fmt

Spec = Sequence[tuple[str, str, str]]  # (header key, column, formatter name)


def _us_to_duration(value: float | None) -> str:
    return fmt.duration(None if value is None else value * 1e3)


FORMATTERS: dict[str, Callable[[Any], str]] = {
    "pct": lambda v: fmt.percent(v, 1),
    # A share of a roof above 100% is marked (↑): the report explains it beside the table.
    "roof_pct": lambda v: fmt.percent(v, 1) + (" ↑" if v is not None and v > 100 else ""),
    "dur": fmt.duration,
    "us": _us_to_duration,
    "int": fmt.number,
    "num1": lambda v: fmt.number(v, 1),
    "num2": lambda v: fmt.number(v, 2),
    "num3": lambda v: fmt.number(v, 3),
    "text": fmt.plain,
    "code": fmt.code,
    "term": fmt.plain,  # translated before formatting
    "tflops": lambda v: fmt.number(None if v is None else v / 1e12, 2),
    "gbps": lambda v: fmt.number(None if v is None else v / 1e9, 0),
    "ms": lambda v: fmt.ms(v, 1),
    "ms3": lambda v: fmt.ms(v, 3),
    "bw": fmt.bandwidth,
    "flops_rate": fmt.flop_rate,
    "mb": lambda v: "–" if v is None else f"{v / 1e6:,.1f} MB",
    "bytes": lambda v: "–" if v is None else (f"{v / 1e6:,.2f} MB" if v >= 1e5 else f"{v / 1e3:,.1f} KB"),
    "gbs": lambda v: "–" if v is None else f"{v / 1e9:,.1f} GB/s",
    "joules": fmt.joules,
    "watts": fmt.watts,
}
TEXT_FORMATTERS = {"text", "code", "term"}

STATS = [("total", "total_ns", "dur"), ("instances", "instances", "int"), ("avg", "avg_ns", "dur"),
         ("med", "med_ns", "dur"), ("min", "min_ns", "dur"), ("max", "max_ns", "dur"), ("stddev", "stddev_ns", "dur")]

SPECS: dict[str, Spec] = {
    "kernels": [("time_pct", "time_pct", "pct"), ("library", "library", "text"), ("category", "category", "term"),
                ("kernel", "label", "text"), ("description", "description", "term"), *STATS],
    "unknown": [("time_pct", "time_pct", "pct"), ("total", "total_ns", "dur"), ("instances", "instances", "int"),
                ("full_name", "name", "code")],
    "mix": [("category", "category", "term"), ("distinct_kernels", "kernels", "int"), ("launches", "launches", "int"),
            ("total", "total_ns", "dur"), ("time_pct", "time_pct", "pct")],
    "longest": [("kernel", "label", "text"), ("longest_launch", "max_ns", "dur"), ("median_launch", "med_ns", "dur"),
                ("instances", "instances", "int"), ("class", "roofline_class?", "term")],
    "op_groups": [("time_pct", "time_pct", "pct"), ("op", "op", "code"), ("kernel_sequence", "kernels", "text"),
                  ("instances", "instances", "int"), ("per_instance", "per_instance_ns", "dur"),
                  ("total", "total_ns", "dur")],
    "phases": [("phase", "phase", "term"), ("kernels", "kernel_count", "int"), ("device_time", "device_time_ns", "dur"),
               ("time_pct", "time_pct", "pct"), ("steps", "steps", "int"), ("per_step", "device_time_per_step_ns", "dur"),
               ("kernels_per_step", "kernels_per_step", "num1"), ("span", "span_ns?", "dur"), ("busy", "busy_pct?", "pct"),
               ("mean_gap", "mean_gap_ns?", "dur"), ("median_launch_call", "median_launch_ns?", "dur"),
               ("mean_launch", "mean_launch_ns?", "dur")],
    "breakdown": [("layer_type", "layer_type", "term"), ("module", "layer_module", "code"), ("kernel", "label", "text"),
                  ("per_layer_step", "per_layer_step_ns", "dur"),
                  ("launches_per_layer_step", "launches_per_layer_step", "num2")],
    "layer_types": [("layer_type", "layer_type", "term"), ("layers", "layers", "int"),
                    ("per_layer_step", "per_layer_step_ns", "dur"), ("per_step_all_layers", "per_step_ns", "dur"),
                    ("launches_per_layer_step", "launches_per_layer_step", "num1"), ("time_pct", "time_pct", "pct")],
    "per_layer": [("layer", "layer", "int"), ("layer_type", "layer_type", "term"), ("per_step", "per_step_ns", "dur"),
                  ("launches", "launches", "int")],
    "classes": [("class", "roofline_class", "term"), ("launches", "launches", "int"),
                ("distinct_kernels", "kernels", "int"), ("time_pct", "time_pct", "pct"),
                ("mean_duration", "mean_duration_ns", "dur"), ("mean_compute_roof", "mean_compute_roof_pct", "pct"),
                ("mean_bandwidth_roof", "mean_memory_roof_pct", "pct"),
                ("median_intensity", "median_arithmetic_intensity", "num2"),
                ("mean_est_occupancy", "mean_est_occupancy_pct", "pct"),
                ("mean_registers", "mean_registers_per_thread", "int")],
    "roofline": [("kernel", "label", "text"), ("total", "dur_ns", "dur"), ("precision", "precision", "text"),
                 ("intensity", "intensity", "num2"), ("tflops", "flops_per_s", "tflops"), ("gbps", "bytes_per_s", "gbps"),
                 ("compute_roof", "compute_roof_pct", "roof_pct"), ("bandwidth_roof", "memory_roof_pct", "roof_pct"),
                 ("class", "roofline_class", "term"), ("cost_source", "cost_source?", "term")],
    "gemm_shapes": [("m", "m", "int"), ("n", "n", "int"), ("k", "k", "int"), ("batch", "batch", "int"),
                    ("dtypes", "dtypes", "text"), ("layout", "layout", "text"), ("launches", "count", "int"),
                    ("total", "total_ns", "dur"), ("time_pct", "time_pct", "pct"),
                    ("achieved_tflops", "achieved_tflops", "num2"), ("roof_share", "roof_pct?", "roof_pct"),
                    ("class", "roofline_class?", "term"), ("module", "module", "code"),
                    ("cost_source", "cost_source", "term")],
    "measured_classes": [("class", "measured_class", "term"), ("distinct_kernels", "kernels", "int"),
                         ("share", "share_pct", "pct"), ("sm", "sm_throughput_pct", "pct"),
                         ("dram", "dram_throughput_pct", "pct"), ("memory", "mem_throughput_pct", "pct"),
                         ("occupancy", "achieved_occupancy_pct", "pct"), ("l1_hit", "l1_hit_rate_pct", "pct"),
                         ("l2_hit", "l2_hit_rate_pct", "pct"), ("mean_duration", "duration_us", "us")],
    "measured_kernels": [("kernel", "label", "text"), ("launches", "profiled_launches", "int"),
                         ("duration", "duration_us", "us"), ("sm", "sm_throughput_pct", "pct"),
                         ("dram", "dram_throughput_pct", "pct"), ("memory", "mem_throughput_pct", "pct"),
                         ("occupancy", "achieved_occupancy_pct", "pct"), ("l2_hit", "l2_hit_rate_pct", "pct"),
                         ("measured_intensity", "measured_intensity", "num2"), ("class", "measured_class", "term")],
    "accuracy": [("kernel", "label", "text"), ("flops_analytic", "analytic_flops", "int"), ("flops_measured", "flops", "int"),
                 ("flops_ratio", "flops_ratio", "num3"), ("bytes_analytic", "analytic_bytes", "int"),
                 ("bytes_measured", "dram_bytes", "int"), ("bytes_ratio", "bytes_ratio", "num3")],
    "requirements": [("phase", "phase", "term"), ("target", "target_ms", "ms"), ("measured", "measured", "term"), ("bandwidth_needed", "bandwidth_bytes_per_s", "bw"),
                     ("compute_needed", "compute_flops_per_s", "flops_rate")],
    "weights": [("layer_type", "layer_type", "term"), ("layers", "layers", "int"),
                ("bytes_per_step", "bytes_per_layer_step", "mb")],
    "steps": [("phase", "phase", "term"), ("step", "step", "int"), ("launches", "kernel_count", "int"),
              ("device_time", "device_time_ns", "dur"), ("prefill_tokens", "prefill_tokens?", "int"),
              ("decode_tokens", "decode_tokens?", "int"), ("tokens", "tokens?", "int"), ("requests", "requests?", "int"),
              ("marker", "label?", "code")],
    "energy": [("phase", "phase", "term"), ("energy_time", "time_ns", "dur"), ("tokens", "tokens?", "int"),
               ("energy", "joules", "joules"), ("mean_power", "mean_watts?", "watts"),
               ("energy_from_power", "joules_from_power?", "joules")],
    "idle_phases": [("phase", "phase", "term"), ("idle_gaps", "gaps", "int"), ("idle_total", "idle_ns", "dur"),
                    ("largest_gap", "largest_ns", "dur"), ("largest_gap_pct", "largest_pct", "pct"),
                    ("host_wait_pct", "host_wait_pct?", "pct")],
    "idle_gaps": [("phase", "phase", "term"), ("gap_gpu", "gpu?", "text"), ("gap", "gap_ns", "dur"),
                  ("gap_at", "at_ns", "dur"), ("gap_before", "before", "text"), ("gap_after", "after", "text"),
                  ("op", "op?", "code"), ("host_wait", "host_wait_ns?", "dur")],
    "source_lines": [("source_line", "source_line", "code"), ("total", "total_ns", "dur"),
                     ("time_pct", "time_pct", "pct"), ("launches", "launches", "int"),
                     ("distinct_kernels", "kernels", "int"), ("top_kernel", "top_kernel", "text"),
                     ("module", "module", "code")],
    "communication": [("phase", "phase", "term"), ("collective", "kind", "code"), ("where", "where", "code"),
                      ("message", "bytes", "bytes"),
                      ("instances", "instances", "int"), ("total", "total_ns", "dur"), ("time_pct", "time_pct", "pct"),
                      ("per_rank", "mean_ns", "dur"), ("mean_wait", "mean_wait_ns", "dur"),
                      ("max_wait", "max_wait_ns", "dur"), ("transfer", "mean_transfer_ns", "dur"),
                      ("bus_bandwidth", "bus_bytes_per_s", "gbs"), ("link_share", "link_pct", "pct")],
    "ranks": [("rank", "rank", "int"), ("host", "host?", "code"), ("gpu", "device?", "code"),
              ("launches", "kernel_count", "int"), ("device_time", "device_time_ns", "dur"),
              ("working", "working_ns?", "dur"), ("attributed", "attributed_pct", "pct"), ("ttft", "ttft_ms?", "ms3"), ("tpot", "tpot_ms?", "ms3")],
    "communication_layers": [("phase", "phase", "term"), ("layer_type", "layer_type", "term"),
                             ("layers", "layers", "int"), ("per_rank_step", "comm_per_step_ns", "dur"),
                             ("time_pct", "comm_pct", "pct"), ("wait_share", "wait_pct", "pct")],
    "communication_ranks": [("phase", "phase", "term"), ("rank", "rank", "int"), ("collectives", "collectives", "int"),
                            ("communication", "comm_ns", "dur"), ("time_pct", "comm_pct", "pct"),
                            ("waiting", "wait_ns", "dur"), ("wait_share", "wait_pct", "pct"),
                            ("wait_for_work", "imbalance_pct", "pct"),
                            ("overlap", "overlap_pct", "pct"), ("device_time", "device_time_ns", "dur")],
    "critical_path": [("phase", "phase", "term"), ("steps", "steps", "int"), ("mean_step", "mean_step_ns", "dur"),
                      ("path_compute", "compute_pct", "pct"), ("path_communication", "communication_pct", "pct"),
                      ("path_wait", "wait_pct", "pct"), ("path_launch", "launch_pct", "pct"),
                      ("path_host", "host_pct", "pct"), ("ranks_on_path", "ranks_on_path?", "int"),
                      ("deciding_rank", "deciding_rank?", "int")],
    "critical_path_top": [("path_class", "class", "term"), ("path_kind", "kind", "term"),
                          ("kernel_or_op", "name", "code"), ("module", "module", "code"),
                          ("per_step", "per_step_ns", "dur"), ("path_share", "path_pct", "pct"),
                          ("segments", "segments", "int")],
    "names": [("kernel", "label", "text"), ("library", "library", "text"), ("category", "category", "term"),
              ("description", "description", "term"), ("full_name", "name", "code")],
}


def _has_values(df: pl.DataFrame, column: str) -> bool:
    return column in df.columns and df[column].null_count() < df.height


def table_markdown(df: pl.DataFrame, spec: Spec, headers: dict[str, str], terms: dict[str, str]) -> str:
    """A GitHub Markdown table; numeric columns right-aligned, `term` cells in the report's language. Columns
    the spec marks optional (a trailing `?` on the column name) are left out where the frame lacks them or
    holds only nulls in them."""
    spec = [(key, column.rstrip("?"), kind) for key, column, kind in spec
            if not column.endswith("?") or _has_values(df, column.rstrip("?"))]
    titles = [headers.get(key, key) for key, _, _ in spec]
    right = [kind not in TEXT_FORMATTERS for _, _, kind in spec]
    return fmt.markdown_table(titles, right, (_cells(row, spec, terms) for row in df.iter_rows(named=True)))


def _cells(row: dict[str, Any], spec: Spec, terms: dict[str, str]) -> list[str]:
    cells = []
    for _, column, kind in spec:
        value = row.get(column)
        if kind == "term" and isinstance(value, bool):
            value = terms["yes"] if value else ""
        elif kind == "term" and isinstance(value, str):
            value = terms.get(value, value)
        cells.append(FORMATTERS[kind](value))
    return cells
