"""The cost of each kernel: its framework op's analytic cost (analyze/op_costs.py) split among the op's kernels,
its own bytes for copies and sets, or the cost its launch declared (the engine's kernels)."""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.naming import with_kernel_catalog
from kernelscope.analyze.op_costs import MODELS, op_cost
from kernelscope.analyze.op_groups import FOLLOWER_NAME
from kernelscope.analyze.wide_tables import beside
from kernelscope.contracts.run import Run
from kernelscope.contracts.tables import COST_COLUMNS, conform_kernels, costs_stored

# cost_model of a kernel whose launch declared its own cost (the engine's kernels).
DECLARED_MODEL = "declared"


def op_costs(ops: pl.DataFrame) -> pl.DataFrame:
    """op_id, flops, bytes, precision, cost_model for every CPU op with a model (computed once per distinct
    name + shapes + scalars)."""
    keys = ["name", "input_dims", "input_types", "concrete_inputs"]
    # One row per distinct name + shapes + scalars with the ids of its ops, the keys grouped as category codes (the
    # arguments are categories already, contracts.tables.RAW_ARGUMENT; the name is cast): a group-by on text
    # columns encodes every row's texts into one key (a 2 GB trace: +350 MB at the import's
    # peak, against +140 MB as codes, and faster); a unique and a join back hashed them twice.
    distinct = (ops.lazy().filter((pl.col("cat") == "cpu_op") & pl.col("name").is_in(list(MODELS)))
                .with_columns(pl.col(keys).cast(pl.Categorical)).group_by(keys).agg(pl.col("op_id"))
                .with_columns(pl.col(keys).cast(pl.String)).collect())
    costs = [op_cost(name, dims, types, concrete) for name, dims, types, concrete in distinct.select(keys).iter_rows()]
    table = distinct.select("op_id").with_columns(
        pl.Series("flops", [c.flops if c else None for c in costs], dtype=pl.Float64),
        pl.Series("bytes", [c.bytes if c else None for c in costs], dtype=pl.Float64),
        pl.Series("precision", [c.precision if c else None for c in costs], dtype=pl.String),
        pl.Series("cost_model", [c.model if c else None for c in costs], dtype=pl.String),
    )
    return table.filter(pl.col("cost_model").is_not_null()).explode("op_id")


def kernel_costs(kernels: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Adds flops, bytes, precision, cost_model and cost_op_id to kernels: the cost of the kernel's innermost
    modelled op (its own op, or the nearest enclosing op with a model), split among that op's kernels in
    proportion to their durations. Copies and memsets cost their own bytes. A kernel whose op is an engine cost
    range takes the cost its launch declared (cost_model "declared")."""
    kernels = kernels.drop(COST_COLUMNS, strict=False)
    costs = op_costs(ops) if ops.height else pl.DataFrame(
        schema={"op_id": pl.Int64, "flops": pl.Float64, "bytes": pl.Float64, "precision": pl.String,
                "cost_model": pl.String})
    modelled = np.zeros(max(ops.height, 1), dtype=bool)
    modelled[costs["op_id"].to_numpy()] = True
    parent = ops["parent_op_id"].fill_null(-1).to_numpy() if ops.height else np.full(1, -1)
    target = kernels["op_id"].fill_null(-1).to_numpy().copy()
    for _ in range(64):  # walk up enclosing ops until one has a model
        climb = (target >= 0) & ~modelled[np.maximum(target, 0)]
        if not climb.any():
            break
        target[climb] = parent[target[climb]]
    with_op = kernels.with_columns(pl.Series("cost_op_id", target).replace(-1, None))
    with_op = beside(with_op, costs.rename({"op_id": "cost_op_id", "bytes": "bytes_right"}), ["cost_op_id"])
    share = pl.col("dur_ns") / pl.col("dur_ns").sum().over("cost_op_id")
    count_share = 1.0 / pl.len().over("cost_op_id")
    split = pl.when(pl.col("dur_ns").sum().over("cost_op_id") > 0).then(share).otherwise(count_share)
    # FLOPs belong to an op's main kernels: a split-K reduction or an attention combine step does a negligible
    # share of the arithmetic, whatever its duration.
    follower = pl.col("name").str.contains(FOLLOWER_NAME)
    main_ns = pl.when(~follower).then(pl.col("dur_ns")).otherwise(0).sum().over("cost_op_id")
    flops_split = (
        pl.when(main_ns > 0).then(pl.when(follower).then(0.0).otherwise(pl.col("dur_ns") / main_ns)).otherwise(split)
    )
    copy_bytes = (
        pl.when(pl.col("kind") == "memset").then(pl.col("bytes").cast(pl.Float64))
        .when(pl.col("name").str.contains("DtoD")).then(2.0 * pl.col("bytes").cast(pl.Float64))
        .otherwise(pl.col("bytes").cast(pl.Float64))
    )
    is_copy = pl.col("kind").is_in(["memcpy", "memset"])
    costed = with_op.with_columns(
        pl.when(is_copy).then(0.0).otherwise(pl.col("flops") * flops_split).alias("flops"),
        pl.when(is_copy).then(copy_bytes).otherwise(pl.col("bytes_right") * split).alias("bytes_moved"),
        pl.when(is_copy).then(pl.lit("fp32")).otherwise(pl.col("precision")).alias("precision"),
        pl.when(is_copy).then(pl.col("kind")).otherwise(pl.col("cost_model")).alias("cost_model"),
    ).drop("bytes_right")
    return conform_kernels(_with_declared_costs(costed))


def _declared_field(key: str) -> pl.Expr:
    return pl.col("op").str.extract(ranges.cost_field_pattern(key))


def _with_declared_costs(kernels: pl.DataFrame) -> pl.DataFrame:
    """A kernel whose op is a cost range (`ks.cost|<kernel>|flops=…|bytes=…|precision=…`, kernelscope.engine_costs)
    takes the cost its launch declared instead of a model's, split by duration among the kernels of that one
    range (several on the engine's torch backend). A CUDA-graph kernel given the op of its eager twin has no
    op_id: the range's cost is its own."""
    if not kernels.height or not kernels["op"].str.starts_with(ranges.COST_PREFIX).any():
        return kernels  # no cost range (every foreign trace): the regexes and windows below would change nothing
    flops = _declared_field("flops").cast(pl.Float64, strict=False)
    nbytes = _declared_field("bytes").cast(pl.Float64, strict=False)
    declared = (pl.col("op").str.starts_with(ranges.COST_PREFIX) & flops.is_not_null() & nbytes.is_not_null()
                & pl.col("kind").is_in(["kernel", "cpu_op"])).fill_null(False)
    total_ns = pl.col("dur_ns").sum().over("op_id")
    share = (pl.when(pl.col("op_id").is_null()).then(1.0)
             .when(total_ns > 0).then(pl.col("dur_ns") / total_ns)
             .otherwise(1.0 / pl.len().over("op_id")))
    return kernels.with_columns(
        pl.when(declared).then(flops * share).otherwise(pl.col("flops")).alias("flops"),
        pl.when(declared).then(nbytes * share).otherwise(pl.col("bytes_moved")).alias("bytes_moved"),
        pl.when(declared).then(_declared_field("precision").fill_null(ranges.COST_DEFAULT_PRECISION)).otherwise(pl.col("precision"))
        .alias("precision"),
        pl.when(declared).then(pl.lit(DECLARED_MODEL)).otherwise(pl.col("cost_model")).alias("cost_model"),
        pl.when(declared).then(pl.col("op_id")).otherwise(pl.col("cost_op_id")).alias("cost_op_id"),
    )


def with_costs_and_names(run: Run) -> Run:
    """The run with every kernel's analytic cost and catalog names. Runs written by kernelscope store both;
    older runs and fresh captures get them computed here. CPU ops are always named again: their categories
    come from a small data file (data/cpu_ops.toml) that may have grown since the run was written."""
    kernels = run.kernels
    if not costs_stored(kernels):
        kernels = kernel_costs(kernels, run.ops)
    if kernels.height and (kernels["library"].is_null().any() or (kernels["kind"] == "cpu_op").any()):
        kernels = with_kernel_catalog(kernels)
    return run.with_kernels(kernels)
