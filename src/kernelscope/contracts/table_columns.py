"""The columns of the tables that travel between stages, each with its type's name (a Polars dtype: `String`,
`Int64`, `Float64`, `Categorical`); docs/run-format.md describes each column. Free of heavy imports: contracts/tables.py
gives the same columns as Polars dtypes, and a query's views read them as DuckDB types without loading Polars.

Loaders produce trace tables (kernels, launches, ops) with the TRACE_* columns; attribution adds the
ATTRIBUTION columns, the cost models the COST columns, the kernel catalog the CATALOG columns; summary rows of
`nsys stats` imports carry SUMMARY statistics.
"""

INSTANCES = "instances"
CPU_OP = "cpu_op"  # the kind of kernels rows that are CPU ops: runs (or ranks) without device activity
RANK = "rank"
UNKNOWN_PHASE = "unknown"

# What a trace's device activity gives, per kernel / memcpy / memset (or per CPU op on CPU-only runs).
TRACE_KERNEL_COLUMNS: dict[str, str] = {
    "name": "String", "kind": "String", "device": "Int64", "stream": "Int64", "start_ns": "Int64",
    "dur_ns": "Int64", "correlation": "Int64", "external_id": "Int64",
    "grid_x": "Int64", "grid_y": "Int64", "grid_z": "Int64",
    "block_x": "Int64", "block_y": "Int64", "block_z": "Int64",
    "registers_per_thread": "Int64", "shared_memory_bytes": "Int64", "est_occupancy_pct": "Float64",
    "bytes": "Int64",
    # Collectives, where the trace records them per kernel (torch ≥ 2.4 NCCL kernels): collective name, message
    # elements in and out, ranks in the group, element type, process group.
    "collective": "String", "msg_in_elems": "Int64", "msg_out_elems": "Int64", "group_size": "Int64",
    "msg_dtype": "String", "process_group": "String",
}
# Runtime / driver calls that launched device work (kernel_name: where the trace names the launched kernel at
# the call, as ROCm's do; it is how a graph capture, whose kernels never run, says what it recorded).
TRACE_LAUNCH_COLUMNS: dict[str, str] = {
    "api": "String", "pid": "Int64", "tid": "Int64", "start_ns": "Int64", "dur_ns": "Int64",
    "correlation": "Int64", "external_id": "Int64", "kernel_name": "String",
}
# CPU ops and annotation ranges (`cat`: cpu_op or annotation). The ops' arguments as JSON text are categories:
# few distinct texts over millions of ops, held as 4-byte codes instead of 16-byte string views (on a 1 GB trace
# 57 MB less through the whole import); Parquet stores them as dictionary-encoded text either way.
RAW_ARGUMENT = "Categorical"
TRACE_OP_COLUMNS: dict[str, str] = {
    "name": "String", "cat": "String", "pid": "Int64", "tid": "Int64", "start_ns": "Int64",
    "dur_ns": "Int64", "external_id": "Int64", "sequence_number": "Int64", "input_dims": RAW_ARGUMENT,
    "input_types": RAW_ARGUMENT, "concrete_inputs": RAW_ARGUMENT,
}

# Added by attribution (analyze/attribution/attribution.py) and the run's assembly.
ATTRIBUTION_COLUMNS: dict[str, str] = {
    "kernel_id": "Int64", "rank": "Int64", "instances": "Int64",
    "launch_api": "String", "pid": "Int64", "tid": "Int64", "launch_start_ns": "Int64",
    "launch_dur_ns": "Int64", "op": "String", "top_op": "String", "op_id": "Int64",
    "top_op_id": "Int64", "phase": "String", "step": "Int64", "module": "String", "layer": "Int64",
    "generation": "Int64", "source_line": "String",
    # CPU-only runs: the op's whole duration, its children's included (dur_ns is its self time); null elsewhere.
    "op_dur_ns": "Int64",
    # Where the kernel's place in the structure (phase, step, layer, module) came from, the weakest source of those
    # levels: annotation, module event, op shapes, capture trace, inferred (analyze/attribution/attribution_sources.py).
    "attribution_source": "String",
}
# Statistics of a summary row (nsys stats imports): the row stands for `instances` launches.
SUMMARY_COLUMNS: dict[str, str] = {
    "min_ns": "Float64", "max_ns": "Float64", "med_ns": "Float64", "stddev_ns": "Float64",
}
# Analytic costs (analyze/costs/kernel_costs.py): the kernel's share of its op's FLOPs and bytes, the formula and where
# its shapes came from (COST_SOURCES), and for GEMMs the problem they solved (the GEMM shape table).
COST_COLUMNS: dict[str, str] = {
    "cost_op_id": "Int64", "flops": "Float64", "precision": "String", "cost_model": "String",
    "bytes_moved": "Float64", "cost_source": "String",
    "gemm_m": "Int64", "gemm_n": "Int64", "gemm_k": "Int64", "gemm_batch": "Int64",
    "gemm_dtypes": "String", "gemm_layout": "String",
}
# Where a kernel's cost came from, most direct first (docs/roofline.md): the shapes of its own op in the trace,
# the shapes its CUDA-graph capture recorded, a serving engine's step annotation (tokens, context lengths), the
# model's config.json (import --model-config), the kernel's own launch metadata, or an estimate.
COST_SOURCES = ("op_shapes", "capture_shapes", "step_annotation", "model_config", "kernel_metadata", "estimated")
# The kernel catalog's names (analyze/costs/catalog).
CATALOG_COLUMNS: dict[str, str] = {
    "library": "String", "category": "String", "friendly_name": "String", "description": "String",
}

KERNEL_COLUMNS: dict[str, str] = {
    "kernel_id": "Int64", **TRACE_KERNEL_COLUMNS, **ATTRIBUTION_COLUMNS, **SUMMARY_COLUMNS, **COST_COLUMNS,
    **CATALOG_COLUMNS,
}
OP_COLUMNS: dict[str, str] = {
    "op_id": "Int64", **TRACE_OP_COLUMNS, "depth": "Int64", "parent_op_id": "Int64", "rank": "Int64",
}
# Runtime and driver calls that started no device work of the run (synchronisations, event records and waits,
# queries, allocations): calls.parquet, what the dependency graph needs beside the kernels' own launch columns.
CALL_COLUMNS: dict[str, str] = {
    "api": "String", "pid": "Int64", "tid": "Int64", "start_ns": "Int64", "dur_ns": "Int64",
    "correlation": "Int64", "external_id": "Int64", "rank": "Int64",
}

# critical_path.parquet: every segment of every step's critical path (analyze/paths/critical_path, docs/critical-path.md).
PATH_SEGMENT_COLUMNS: dict[str, str] = {
    "phase": "String", "generation": "Int64", "step": "Int64", "rank": "Int64", "start_ns": "Int64",
    "dur_ns": "Int64", "class": "String", "kind": "String", "name": "String", "module": "String",
    "layer": "Int64", "op": "String", "kernel_id": "Int64", "edge": "String", "stream": "Int64",
    "tid": "Int64",
}
