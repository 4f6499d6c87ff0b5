"""How one op's cost is shared among the kernels it launched (analyze/kernel_costs.py builds the units).

Bytes: in proportion to the kernels' durations (each kernel's share of the op's time). FLOPs: to the op's matrix
kernels — those of the categories its model names (GEMM for a GEMM or a fused MoE, attention for attention),
never a follower step (a split-K reduction, an attention combine) — by duration; where the op launched none of
them, to its non-follower kernels. An op that solves several GEMMs (a fused MoE: up, then down) whose matrix
kernels are as many gives each kernel its own GEMM, in launch order, with that GEMM's FLOPs; an op of one GEMM
gives its shape to each of its matrix kernels.
"""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.op_groups import FOLLOWER_CATEGORIES, FOLLOWER_NAME

_GEMM_COLUMNS = ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes")
# Steps that merge partial results (split-KV attention, a MoE's per-expert outputs), whatever their category.
_MERGE_NAME = r"attention\w*_reduce_kernel|reduce_segments|_finalize_matmul|finalize(Kernel|_)"


def split_unit_costs(work: pl.DataFrame, costed: pl.DataFrame) -> pl.DataFrame:
    """work: kernels (in start order) with `_unit`, `dur_ns`, `name`, `category`, `cost_op_id`; costed: per unit
    `_flops`, `_bytes`, `_precision`, `_model`, `_source`, `_flop_categories`, `_gemms`. Adds the COST columns."""
    k = work.join(costed, on="_unit", how="left", maintain_order="left")
    has = pl.col("_model").is_not_null()
    unit = "_unit"
    dur = pl.col("dur_ns").cast(pl.Float64)
    total = dur.sum().over(unit)
    share = pl.when(total > 0).then(dur / total).otherwise(1.0 / pl.len().over(unit))
    follower = (pl.col("name").str.contains(FOLLOWER_NAME) | pl.col("name").str.contains(_MERGE_NAME)
                | pl.col("category").is_in(FOLLOWER_CATEGORIES)).fill_null(False)
    matrix = (pl.col("_flop_categories").list.contains(pl.col("category")) & ~follower).fill_null(False)
    k = k.with_columns(matrix.alias("_matrix"), follower.alias("_follower"))
    flopper = (pl.when(pl.col("_matrix").any().over(unit)).then(pl.col("_matrix"))
               .when((~pl.col("_follower")).any().over(unit)).then(~pl.col("_follower")).otherwise(True))
    k = k.with_columns(pl.when(has).then(flopper).otherwise(False).alias("_flopper"))
    flop_ns = pl.when(pl.col("_flopper")).then(dur).otherwise(0.0).sum().over(unit)
    floppers = pl.col("_flopper").sum().over(unit)
    flop_share = pl.when(flop_ns > 0).then(dur / flop_ns).otherwise(1.0 / floppers)
    parts = pl.col("_gemms").list.len().fill_null(0)
    index = (pl.col("_flopper").cast(pl.Int64).cum_sum().over(unit) - 1)
    own_part = pl.col("_flopper") & (parts == floppers) & (parts > 0)
    k = k.with_columns(
        pl.when(own_part).then(pl.col("_gemms").list.get(index, null_on_oob=True))
        .when(pl.col("_flopper") & (parts == 1)).then(pl.col("_gemms").list.first()).alias("_part"))
    part = pl.col("_part").struct
    part_flops = 2.0 * part.field("m") * part.field("n") * part.field("k") * part.field("batch")
    flops = (pl.when(~has).then(None)
             .when(own_part).then(part_flops)
             .when(pl.col("_flopper")).then(pl.col("_flops") * flop_share).otherwise(0.0))
    return k.with_columns(
        flops.alias("flops"),
        pl.when(has).then(pl.col("_bytes") * share).alias("bytes_moved"),
        pl.when(has).then(pl.col("_precision")).alias("precision"),
        pl.when(has).then(pl.col("_model")).alias("cost_model"),
        pl.when(has).then(pl.col("_source")).alias("cost_source"),
        pl.when(has).then(pl.col("cost_op_id")).alias("cost_op_id"),
        *(part.field(c.removeprefix("gemm_")).alias(c) for c in _GEMM_COLUMNS),
        pl.lit(None, dtype=pl.String).alias("gemm_layout"),
    ).drop("_flops", "_bytes", "_precision", "_model", "_source", "_flop_categories", "_gemms", "_matrix",
           "_follower", "_flopper", "_part")
