"""The columns of the tables that travel between stages (docs/run-format.md describes each column).

Loaders produce trace tables (kernels, launches, ops) with the TRACE_* columns; attribution adds the
ATTRIBUTION columns, the cost models the COST columns, the kernel catalog the CATALOG columns; summary rows of
`nsys stats` imports carry SUMMARY statistics. `conform_kernels` / `conform_ops` give a table every column of its
schema with the schema's dtype (missing ones null; `instances` 1, `rank` 0, `phase` unknown), so analysis never
asks whether a column is there. Columns beyond the schema are kept after it.
"""

from __future__ import annotations

import polars as pl

INSTANCES = "instances"
CPU_OP = "cpu_op"  # the kind of kernels rows that are CPU ops: runs (or ranks) without device activity
RANK = "rank"
UNKNOWN_PHASE = "unknown"

# What a trace's device activity gives, per kernel / memcpy / memset (or per CPU op on CPU-only runs).
TRACE_KERNEL_COLUMNS: dict[str, pl.DataType] = {
    "name": pl.String(), "kind": pl.String(), "device": pl.Int64(), "stream": pl.Int64(), "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(), "correlation": pl.Int64(), "external_id": pl.Int64(),
    "grid_x": pl.Int64(), "grid_y": pl.Int64(), "grid_z": pl.Int64(),
    "block_x": pl.Int64(), "block_y": pl.Int64(), "block_z": pl.Int64(),
    "registers_per_thread": pl.Int64(), "shared_memory_bytes": pl.Int64(), "est_occupancy_pct": pl.Float64(),
    "bytes": pl.Int64(),
    # Collectives, where the trace records them per kernel (torch ≥ 2.4 NCCL kernels): collective name, message
    # elements in and out, ranks in the group, element type, process group.
    "collective": pl.String(), "msg_in_elems": pl.Int64(), "msg_out_elems": pl.Int64(), "group_size": pl.Int64(),
    "msg_dtype": pl.String(), "process_group": pl.String(),
}
# Runtime / driver calls that launched device work (kernel_name: where the trace names the launched kernel at
# the call, as ROCm's do; it is how a graph capture, whose kernels never run, says what it recorded).
TRACE_LAUNCH_COLUMNS: dict[str, pl.DataType] = {
    "api": pl.String(), "pid": pl.Int64(), "tid": pl.Int64(), "start_ns": pl.Int64(), "dur_ns": pl.Int64(),
    "correlation": pl.Int64(), "external_id": pl.Int64(), "kernel_name": pl.String(),
}
# CPU ops and annotation ranges (`cat`: cpu_op or annotation). The ops' arguments as JSON text are categories:
# few distinct texts over millions of ops, held as 4-byte codes instead of 16-byte string views (on a 1 GB trace
# 57 MB less through the whole import); Parquet stores them as dictionary-encoded text either way.
RAW_ARGUMENT = pl.Categorical()
TRACE_OP_COLUMNS: dict[str, pl.DataType] = {
    "name": pl.String(), "cat": pl.String(), "pid": pl.Int64(), "tid": pl.Int64(), "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(), "external_id": pl.Int64(), "sequence_number": pl.Int64(), "input_dims": RAW_ARGUMENT,
    "input_types": RAW_ARGUMENT, "concrete_inputs": RAW_ARGUMENT,
}

# Added by attribution (analyze/attribution/attribution.py) and the run's assembly.
ATTRIBUTION_COLUMNS: dict[str, pl.DataType] = {
    "kernel_id": pl.Int64(), "rank": pl.Int64(), "instances": pl.Int64(),
    "launch_api": pl.String(), "pid": pl.Int64(), "tid": pl.Int64(), "launch_start_ns": pl.Int64(),
    "launch_dur_ns": pl.Int64(), "op": pl.String(), "top_op": pl.String(), "op_id": pl.Int64(),
    "top_op_id": pl.Int64(), "phase": pl.String(), "step": pl.Int64(), "module": pl.String(), "layer": pl.Int64(),
    "generation": pl.Int64(), "source_line": pl.String(),
    # CPU-only runs: the op's whole duration, its children's included (dur_ns is its self time); null elsewhere.
    "op_dur_ns": pl.Int64(),
    # Where the kernel's place in the structure (phase, step, layer, module) came from, the weakest source of those
    # levels: annotation, module event, op shapes, capture trace, inferred (analyze/attribution/attribution_sources.py).
    "attribution_source": pl.String(),
}
# Statistics of a summary row (nsys stats imports): the row stands for `instances` launches.
SUMMARY_COLUMNS: dict[str, pl.DataType] = {
    "min_ns": pl.Float64(), "max_ns": pl.Float64(), "med_ns": pl.Float64(), "stddev_ns": pl.Float64(),
}
# Analytic costs (analyze/costs/kernel_costs.py): the kernel's share of its op's FLOPs and bytes, the formula and where
# its shapes came from (COST_SOURCES), and for GEMMs the problem they solved (the GEMM shape table).
COST_COLUMNS: dict[str, pl.DataType] = {
    "cost_op_id": pl.Int64(), "flops": pl.Float64(), "precision": pl.String(), "cost_model": pl.String(),
    "bytes_moved": pl.Float64(), "cost_source": pl.String(),
    "gemm_m": pl.Int64(), "gemm_n": pl.Int64(), "gemm_k": pl.Int64(), "gemm_batch": pl.Int64(),
    "gemm_dtypes": pl.String(), "gemm_layout": pl.String(),
}
# Where a kernel's cost came from, most direct first (docs/roofline.md): the shapes of its own op in the trace,
# the shapes its CUDA-graph capture recorded, a serving engine's step annotation (tokens, context lengths), the
# model's config.json (import --model-config), the kernel's own launch metadata, or an estimate.
COST_SOURCES = ("op_shapes", "capture_shapes", "step_annotation", "model_config", "kernel_metadata", "estimated")
# The kernel catalog's names (analyze/costs/catalog).
CATALOG_COLUMNS: dict[str, pl.DataType] = {
    "library": pl.String(), "category": pl.String(), "friendly_name": pl.String(), "description": pl.String(),
}

KERNEL_COLUMNS: dict[str, pl.DataType] = {
    "kernel_id": pl.Int64(), **TRACE_KERNEL_COLUMNS, **ATTRIBUTION_COLUMNS, **SUMMARY_COLUMNS, **COST_COLUMNS,
    **CATALOG_COLUMNS,
}
OP_COLUMNS: dict[str, pl.DataType] = {
    "op_id": pl.Int64(), **TRACE_OP_COLUMNS, "depth": pl.Int64(), "parent_op_id": pl.Int64(), "rank": pl.Int64(),
}
# Runtime and driver calls that started no device work of the run (synchronisations, event records and waits,
# queries, allocations): calls.parquet, what the dependency graph needs beside the kernels' own launch columns.
CALL_COLUMNS: dict[str, pl.DataType] = {
    "api": pl.String(), "pid": pl.Int64(), "tid": pl.Int64(), "start_ns": pl.Int64(), "dur_ns": pl.Int64(),
    "correlation": pl.Int64(), "external_id": pl.Int64(), "rank": pl.Int64(),
}

# critical_path.parquet: every segment of every step's critical path (analyze/paths/critical_path, docs/critical-path.md).
PATH_SEGMENT_COLUMNS: dict[str, pl.DataType] = {
    "phase": pl.String(), "generation": pl.Int64(), "step": pl.Int64(), "rank": pl.Int64(), "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(), "class": pl.String(), "kind": pl.String(), "name": pl.String(), "module": pl.String(),
    "layer": pl.Int64(), "op": pl.String(), "kernel_id": pl.Int64(), "edge": pl.String(), "stream": pl.Int64(),
    "tid": pl.Int64(),
}

_DEFAULTS = {INSTANCES: 1, RANK: 0, "phase": UNKNOWN_PHASE}


def conform(table: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """`table` with every column of `columns` in that order and dtype (missing ones filled with their default or
    null), then any other columns it has; in one chunk per column (Polars' eager group_by and join copy every
    column of a frame in several chunks into one, on every call: a copy of the whole table each time)."""
    if _conforms(table, columns):
        return table  # a run read back, or conformed before: nothing to cast, fill or gather
    present = set(table.columns)
    exprs = []
    for name, dtype in columns.items():
        default = _DEFAULTS.get(name)
        column = pl.col(name).cast(dtype) if name in present else pl.lit(None, dtype=dtype)
        exprs.append(column.fill_null(default).alias(name) if default is not None else column.alias(name))
    extra = [name for name in table.columns if name not in columns]
    return table.select(*exprs, *extra).rechunk()


def _conforms(table: pl.DataFrame, columns: dict[str, pl.DataType]) -> bool:
    """Whether conform would return `table` as it is: `columns` first, in order and type, defaulted columns without
    nulls, every column in one chunk."""
    schema = list(table.schema.items())
    if schema[: len(columns)] != list(columns.items()):
        return False
    if any(table[name].null_count() for name in _DEFAULTS if name in columns):
        return False
    return all(count <= 1 for count in table.n_chunks("all"))


def costs_stored(kernels: pl.DataFrame) -> bool:
    """Whether a kernels table carries its analytic costs (runs kernelscope writes do); one without any is costed
    from its ops table (analyze/costs/kernel_costs). Columns the table lacks count as empty."""
    if kernels.height == 0:
        return True
    return any(c in kernels.columns and not kernels[c].is_null().all() for c in ("flops", "cost_model"))


def conform_kernels(kernels: pl.DataFrame) -> pl.DataFrame:
    return conform(kernels, KERNEL_COLUMNS)


def conform_ops(ops: pl.DataFrame) -> pl.DataFrame:
    return conform(ops, OP_COLUMNS)


def conform_calls(calls: pl.DataFrame) -> pl.DataFrame:
    return conform(calls, CALL_COLUMNS)


def empty_trace_tables() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Kernels, launches and ops with no rows."""
    return (pl.DataFrame(schema=TRACE_KERNEL_COLUMNS), pl.DataFrame(schema=TRACE_LAUNCH_COLUMNS),
            pl.DataFrame(schema=TRACE_OP_COLUMNS))
