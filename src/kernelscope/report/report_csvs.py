"""The report's tables as CSV files (tables/*.csv): every table the report shows, per phase where it has phases, and where each number a finding prints comes from."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from kernelscope.analyze.report_tables import (
    ReportTables,
)
from kernelscope.report.critical_path import path_csv_frames
from kernelscope.report.templating import (
    write_csv_tables,
)


def write_report_csvs(tables: ReportTables, directory: Path) -> list[Path]:
    frames: dict[str, pl.DataFrame] = {"phases": tables.phases, "decode_steps": tables.steps}
    for phase, t in tables.by_phase.items():
        frames[f"kernels_{phase}"] = t.kernels
    for prefix, name in (("op_groups", "op_groups"), ("categories", "categories"), ("libraries", "libraries"),
                         ("longest_launches", "longest"), ("layer_breakdown", "layer_breakdown"),
                         ("layer_types", "layer_types"), ("per_layer", "per_layer"),
                         ("roofline_classes", "classes"), ("roofline_kernels", "roofline_kernels"),
                         ("gemm_shapes", "gemm_shapes")):
        for phase, df in tables.per_phase(name).items():
            frames[f"{prefix}_{phase}"] = df
    frames["kernel_names"] = tables.labels
    if tables.every_step is not None:
        frames["steps"] = tables.every_step
    if tables.idle is not None:
        frames["idle_gaps"] = tables.idle.per_phase
        frames["largest_idle_gaps"] = tables.idle.largest
    if tables.source_lines is not None:
        frames["source_lines"] = tables.source_lines
    if tables.measured is not None:
        frames["ncu_kernels"] = tables.measured.kernels
        frames["ncu_classes"] = tables.measured.classes
        frames["ncu_vs_analytic"] = tables.measured.analytic_vs_measured
    if tables.accelerator is not None and tables.accelerator.requirements.height:
        frames["accelerator_requirements"] = tables.accelerator.requirements
    if tables.unattributed is not None:
        frames["unattributed_kernels"] = tables.unattributed
    if tables.generations is not None:
        frames["images"] = tables.generations
    if tables.ranks is not None:
        frames["ranks"] = tables.ranks
    if tables.communication is not None:
        frames["communication"] = tables.communication.by_collective
        frames["communication_ranks"] = tables.communication.by_rank
        if tables.communication.by_layer is not None:
            frames["communication_layers"] = tables.communication.by_layer
        frames["communication_instances"] = tables.communication.instances.select(
            "rank", "phase", "group", "kind", "seq", "name", "start_ns", "dur_ns", "wait_ns", "transfer_ns", "bytes")
    frames.update(path_csv_frames(tables.critical_path))
    # Where each number a finding prints comes from: the table (a CSV beside this one), the rows it takes and
    # how it is combined, or the numbers it is derived from.
    frames["findings"] = pl.DataFrame(
        [(f"F{i}", f.id, f.kind, name, str(m.value), m.table, m.column, json.dumps(m.rows) if m.rows else None,
          m.agg, ",".join(m.derived_from) or None, m.formula)
         for i, f in enumerate(tables.findings, start=1) for name, m in f.numbers.items()],
        schema={"finding": pl.String, "rule": pl.String, "kind": pl.String, "number": pl.String, "value": pl.String,
                "table": pl.String, "column": pl.String, "rows": pl.String, "agg": pl.String,
                "derived_from": pl.String, "formula": pl.String}, orient="row",
    )
    return write_csv_tables(frames, directory)
