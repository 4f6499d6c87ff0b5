"""The `nsys stats --report cuda_gpu_kern_sum` table of a run's kernels, with nsys's exact column names and number
formats, plus kernelscope's catalog columns after `Name` (docs/export.md)."""

from __future__ import annotations

import polars as pl

from kernelscope import inert, ranges
from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.structure.phases import ordered_phases
from kernelscope.errors import UserError

CPU_OP_KIND = "cpu_op"

# kernel_summary's columns → the header nsys prints (cuda_gpu_kern_sum, CSV format), in nsys's order.
NSYS_COLUMNS = {
    "time_pct": "Time (%)",
    "total_ns": "Total Time (ns)",
    "instances": "Instances",
    "avg_ns": "Avg (ns)",
    "med_ns": "Med (ns)",
    "min_ns": "Min (ns)",
    "max_ns": "Max (ns)",
    "stddev_ns": "StdDev (ns)",
    "name": "Name",
}
# kernelscope's own columns, after Name so that scripts reading nsys's columns keep working.
CATALOG_COLUMNS = {"library": "Library", "category": "Category", "friendly_name": "Friendly Name"}
NVTX_COLUMN = "NVTX Range"
# On CPU-only runs, whose rows are CPU ops: `Kind` = cpu_op, so that importing the file again reads CPU work, not
# device time (load/nsys_stats.py).
KIND_COLUMN = "Kind"


def kern_sum_table(kernels: pl.DataFrame, phase: str | None = None, nvtx: bool = False,
                   source: str = "run") -> pl.DataFrame:
    """nsys cuda_gpu_kern_sum's rows for the run's kernels (memory copies and sets are other nsys reports;
    on CPU-only runs, the CPU ops that stand in for kernels), with the catalog columns appended. With `nvtx`,
    one group per phase behind a leading NVTX Range column; Time (%) is then the share within the group."""
    kinds = set(kernels["kind"].unique()) if kernels.height else set()
    kind = "kernel" if "kernel" in kinds else CPU_OP_KIND if CPU_OP_KIND in kinds else None
    if kind is None:
        raise UserError(f"{source}: no kernels in this run")
    rows = kernels.filter(pl.col("kind") == kind)
    if phase is not None:
        rows = rows.filter(pl.col("phase") == phase)
        if rows.height == 0:
            present = ", ".join(sorted(kernels.filter(pl.col("kind") == kind)["phase"].drop_nulls().unique()))
            raise UserError(f"{source}: no kernels in phase {phase} (phases in this run: {present})")
    if rows["library"].is_null().any():
        rows = with_kernel_catalog(rows)

    stats = kernel_summary(rows, by=["phase"] if nvtx else None)
    catalog = rows.group_by("name").agg([pl.col(c).drop_nulls().first() for c in CATALOG_COLUMNS])
    stats = stats.join(catalog, on="name", how="left", maintain_order="left")
    columns = [
        pl.col("time_pct").cast(pl.Float64),
        pl.col("total_ns").round().cast(pl.Int64),
        pl.col("instances").round().cast(pl.Int64),
        pl.col("avg_ns").cast(pl.Float64),
        pl.col("med_ns").cast(pl.Float64),
        pl.col("min_ns").round().cast(pl.Int64),
        pl.col("max_ns").round().cast(pl.Int64),
        pl.col("stddev_ns").cast(pl.Float64),
        pl.col("name"),
    ]
    table = stats.select(
        *([_nvtx_range(pl.col("phase")).alias(NVTX_COLUMN)] if nvtx else []),
        *(c.alias(NSYS_COLUMNS[n]) for c, n in zip(columns, NSYS_COLUMNS, strict=True)),
        *(pl.col(c).alias(label) for c, label in CATALOG_COLUMNS.items()),
        *([pl.lit(CPU_OP_KIND).alias(KIND_COLUMN)] if kind == CPU_OP_KIND else []),
        *([_phase_order(rows).alias("_order")] if nvtx else []),
    )
    if nvtx:  # phases in the order they run; kernel_summary already sorted each group by total time
        table = table.sort("_order", maintain_order=True).drop("_order")
    return table


def _nvtx_range(phase: pl.Expr) -> pl.Expr:
    """The phase's range name; kernels outside any phase range get an empty one (nsys leaves them unprefixed)."""
    return pl.when(phase.is_not_null() & (phase != ranges.UNKNOWN)).then(
        pl.lit(ranges.PHASE_PREFIX) + phase
    ).otherwise(pl.lit(""))


def _phase_order(rows: pl.DataFrame) -> pl.Expr:
    """Report order of the phases: model stages as they ran, prefill, decode, unknown."""
    first = rows.group_by("phase").agg(pl.col("start_ns").min())
    order = ordered_phases(first["phase"].drop_nulls().to_list(), dict(first.iter_rows()))
    return pl.col("phase").replace_strict({p: i for i, p in enumerate(order)}, default=len(order),
                                          return_dtype=pl.Int64)


def write_kern_sum_csv(table: pl.DataFrame) -> str:
    """CSV as nsys prints it: percentages and Avg / Med / StdDev with one decimal, the rest as integers."""
    return inert.csv_frame(table).write_csv(float_precision=1, float_scientific=False)
