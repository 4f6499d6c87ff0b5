"""Attribute every device kernel to its launching call, framework op, module, layer, phase and step.

Kernel → launching runtime call (same correlation id) → the CPU thread and time of the launch → the
innermost CPU op, the outermost CPU op, the innermost module range and the phase range open on that
thread at that time (and the generation range, on runs that profile several generate() calls). A kernel
with no launch record falls back to the CPU op with its External id. A cost range of the engine
(`ks.cost|…`, one declared launch) open at launch takes the place of the framework ops.
On CPU-only traces the CPU ops take the role of kernels, each with its self time (its duration minus
the durations of the ops directly inside it), so that every microsecond is counted once.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.intervals import NestedIntervals, gather_rows
from kernelscope.analyze.wide_tables import beside, time_where
from kernelscope.contracts.tables import conform_kernels, conform_ops
from kernelscope.contracts.trace import TraceTables


def attribute(tables: TraceTables) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Returns (kernels, ops): kernels sorted by start with attribution columns; ops with op_id, depth. Both
    have every column of their schema (contracts.tables)."""
    ops = tables.ops.with_row_index("op_id").with_columns(pl.col("op_id").cast(pl.Int64))
    threads = _thread_codes(ops, tables.launches)
    ops = beside(ops, threads, ["pid", "tid"])  # beside, not joined: the ops table is not copied
    span = _span(ops, tables.kernels, tables.launches)

    is_cpu_op = pl.col("cat") == "cpu_op"
    # The columns the nesting and the kernels' ops need (a copy of all of them would be most of the ops table).
    # (Narrowed before filtering: a filter first would copy every column of the ops table, the import's peak.)
    cpu = ops.select("op_id", "name", "thread", "start_ns", "dur_ns", "cat").filter(is_cpu_op).drop("cat")
    cpu_index = _index(cpu, span)
    cpu_ids = cpu["op_id"].to_numpy()
    depth = np.zeros(len(ops), dtype=np.int64)
    depth[cpu_ids[cpu_index.rows]] = cpu_index.depth
    parent = np.full(len(ops), -1, dtype=np.int64)
    has_parent = cpu_index.parent >= 0
    parent[cpu_ids[cpu_index.rows[has_parent]]] = cpu_ids[cpu_index.rows[cpu_index.parent[has_parent]]]
    ops = ops.with_columns(pl.Series("depth", depth), pl.Series("parent_op_id", parent).replace(-1, None))

    if tables.kernels.height == 0 and cpu.height > 0:
        kernels = _cpu_self_time_kernels(ops.filter(is_cpu_op), cpu_index)
    else:
        kernels = _with_launches(tables.kernels, tables.launches, ops, threads)

    thread_code = kernels["thread"].fill_null(-1).to_numpy()
    t = kernels["launch_start_ns"].fill_null(-1).to_numpy()
    thread_code = np.where(t < 0, -1, thread_code)

    op_row = cpu_index.innermost(thread_code, t)
    top_row = cpu_index.outermost(thread_code, t)
    cpu_names = cpu["name"]
    kernels = kernels.with_columns(
        gather_rows(cpu_names, op_row).alias("op"),
        gather_rows(cpu_names, top_row).alias("top_op"),
        _ids(cpu_ids, op_row).alias("op_id"),
        _ids(cpu_ids, top_row).alias("top_op_id"),
    )
    # The CPU ops' index and columns are done with: let go before the ranges' indexes are built (on a 2 GB trace
    # they are ~0.25 GB, and this is the import's peak).
    del cpu, cpu_index, cpu_ids, cpu_names, depth, parent, has_parent

    annotations = ops.filter(pl.col("cat") == "annotation")
    kernels = _with_declared_ops(kernels, annotations.filter(pl.col("name").str.starts_with(ranges.COST_PREFIX)),
                                 span, thread_code, t)
    phases = annotations.filter(pl.col("name").str.starts_with(ranges.PHASE_PREFIX))
    modules = annotations.filter(pl.col("name").str.starts_with(ranges.MODULE_PREFIX))
    generations = annotations.filter(pl.col("name").str.starts_with(ranges.GENERATION_PREFIX))
    # Each range's name is taken apart once (phase and step, module and layer, generation), then gathered per
    # kernel: string work per range, not per kernel, and the kernels' columns are views of the ranges' strings.
    phase_parts = phases["name"].str.strip_prefix(ranges.PHASE_PREFIX).str.split_exact(":", 1)
    module_of = modules["name"].str.strip_prefix(ranges.MODULE_PREFIX)
    phase_rows = _index(phases, span).innermost(thread_code, t)
    module_rows = _index(modules, span).innermost(thread_code, t)
    generation_rows = _index(generations, span).innermost(thread_code, t)
    kernels = kernels.with_columns(
        gather_rows(phase_parts.struct.field("field_0"), phase_rows).fill_null(ranges.UNKNOWN).alias("phase"),
        gather_rows(phase_parts.struct.field("field_1").cast(pl.Int64, strict=False), phase_rows).alias("step"),
        gather_rows(module_of, module_rows).alias("module"),
        gather_rows(module_of.str.extract(ranges.LAYER_IN_MODULE, 1).cast(pl.Int64), module_rows).alias("layer"),
        gather_rows(generations["name"].str.strip_prefix(ranges.GENERATION_PREFIX).cast(pl.Int64, strict=False),
                    generation_rows).alias("generation"),
    )
    kernels = kernels.sort("start_ns").with_row_index("kernel_id").with_columns(pl.col("kernel_id").cast(pl.Int64))
    return conform_kernels(kernels.drop("thread")), conform_ops(ops.drop("thread"))


def _with_declared_ops(kernels: pl.DataFrame, declared: pl.DataFrame, span: int, thread_code: np.ndarray,
                       t: np.ndarray) -> pl.DataFrame:
    """A cost range (one engine launch declaring its cost) open at launch becomes the kernel's op and top op,
    also over the framework ops it encloses (the engine's torch backend): its kernels are one op group."""
    row = _index(declared, span).innermost(thread_code, t)
    name = gather_rows(declared["name"], row)
    op_id = _ids(declared["op_id"].to_numpy(), row)
    return kernels.with_columns(
        pl.coalesce(name, "op").alias("op"),
        pl.coalesce(name, "top_op").alias("top_op"),
        pl.coalesce(op_id, "op_id").alias("op_id"),
        pl.coalesce(op_id, "top_op_id").alias("top_op_id"),
    )


def attribution_coverage(kernels: pl.DataFrame) -> float:
    """Share of device time attributed to both a module and a phase."""
    total = kernels["dur_ns"].sum()
    if not total:
        return 0.0
    known = time_where(kernels, (pl.col("phase") != ranges.UNKNOWN) & pl.col("module").is_not_null())
    return float(known / total)


def _thread_codes(ops: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    pairs = pl.concat([ops.select("pid", "tid"), launches.select("pid", "tid")]).unique().sort("pid", "tid")
    return pairs.with_row_index("thread").with_columns(pl.col("thread").cast(pl.Int64))


def _span(*tables: pl.DataFrame) -> int:
    """A band width larger than any end time (ns), so threads' keys never overlap."""
    ends = [int((t["start_ns"] + t["dur_ns"]).max() or 0) for t in tables if t.height]
    return max(ends, default=0) + 2


def _index(intervals: pl.DataFrame, span: int) -> NestedIntervals:
    return NestedIntervals.build(
        intervals["thread"].fill_null(-1).to_numpy(),
        intervals["start_ns"].to_numpy(),
        intervals["dur_ns"].to_numpy(),
        span,
    )


def _ids(ids: np.ndarray, rows: np.ndarray) -> pl.Series:
    if len(ids) == 0:
        return pl.Series([None] * len(rows), dtype=pl.Int64)
    return pl.Series(np.where(rows >= 0, ids[np.maximum(rows, 0)], -1)).replace(-1, None)


def _with_launches(
    kernels: pl.DataFrame, launches: pl.DataFrame, ops: pl.DataFrame, threads: pl.DataFrame
) -> pl.DataFrame:
    # A correlation id held by two launch records (a corrupt or hand-merged trace) says nothing about which one
    # launched the kernel: those kernels are not tied by it (the External id may still tie them) rather than
    # silently given to the first.
    launch_cols = launches.filter(pl.col("correlation").is_not_null()).unique("correlation", keep="none").select(
        "correlation",
        pl.col("api").alias("launch_api"),
        "pid",
        "tid",
        pl.col("start_ns").alias("launch_start_ns"),
        pl.col("dur_ns").alias("launch_dur_ns"),
    )
    joined = beside(kernels, launch_cols, ["correlation"])
    missing = joined.filter(pl.col("launch_start_ns").is_null() & pl.col("external_id").is_not_null())
    if missing.height:
        # Kernels without a launch record: use the CPU op that carries the kernel's External id.
        by_external = (
            ops.filter((pl.col("cat") == "cpu_op") & pl.col("external_id").is_in(missing["external_id"].implode()))
            .unique("external_id", keep="first")
            .select(
                "external_id",
                pl.col("pid").alias("op_pid"),
                pl.col("tid").alias("op_tid"),
                pl.col("start_ns").alias("op_start_ns"),
            )
        )
        joined = beside(joined, by_external, ["external_id"]).with_columns(
            pl.coalesce("pid", "op_pid").alias("pid"),
            pl.coalesce("tid", "op_tid").alias("tid"),
            pl.coalesce("launch_start_ns", "op_start_ns").alias("launch_start_ns"),
        ).drop("op_pid", "op_tid", "op_start_ns")
    return beside(joined, threads, ["pid", "tid"])


def _cpu_self_time_kernels(cpu: pl.DataFrame, index: NestedIntervals) -> pl.DataFrame:
    dur = cpu["dur_ns"].to_numpy()
    self_ns = np.maximum(dur - index.child_time(dur), 0).astype(np.int64)
    leaves = cpu.with_columns(pl.Series("dur_ns", self_ns), cpu["dur_ns"].alias("op_dur_ns"))
    n = leaves.height
    nulls = pl.Series([None] * n, dtype=pl.Int64)
    return pl.DataFrame(
        {
            "name": leaves["name"],
            "kind": pl.Series(["cpu_op"] * n, dtype=pl.String),
            "device": nulls,
            "stream": nulls,
            "start_ns": leaves["start_ns"],
            "dur_ns": leaves["dur_ns"],
            "correlation": nulls,
            "external_id": leaves["external_id"],
            "grid_x": nulls,
            "grid_y": nulls,
            "grid_z": nulls,
            "block_x": nulls,
            "block_y": nulls,
            "block_z": nulls,
            "registers_per_thread": nulls,
            "shared_memory_bytes": nulls,
            "est_occupancy_pct": pl.Series([None] * n, dtype=pl.Float64),
            "bytes": nulls,
            "launch_api": pl.Series([None] * n, dtype=pl.String),
            "pid": leaves["pid"],
            "tid": leaves["tid"],
            "launch_start_ns": leaves["start_ns"],
            "launch_dur_ns": nulls,
            "op_dur_ns": leaves["op_dur_ns"],
            "thread": leaves["thread"],
        }
    )
