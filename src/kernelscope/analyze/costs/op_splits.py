"""How one op's cost is shared among the kernels it launched (analyze/costs/kernel_costs.py builds the units).

Bytes: in proportion to the kernels' durations (each kernel's share of the op's time). FLOPs: to the op's matrix
kernels — those of the categories its model names (GEMM for a GEMM or a fused MoE, attention for attention),
never a follower step (a split-K reduction, an attention combine, a MoE's finalize) — by duration; where the op
launched none of them, to its non-follower kernels. An op that solves several GEMMs (a fused MoE: up, then down)
whose matrix kernels are as many gives each kernel its own GEMM, in launch order, with that GEMM's FLOPs; an op of
one GEMM gives its shape to each of its matrix kernels.
"""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.op_groups import FOLLOWER_CATEGORIES, FOLLOWER_NAME

_GEMM_COLUMNS = ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes")
# Steps that merge partial results (split-KV attention, a MoE's per-expert outputs), whatever their category, and
# steps that set a grouped GEMM up (its groups' sizes and pointers): none does the op's arithmetic.
_MERGE_NAME = r"attention\w*_reduce_kernel|reduce_segments|_finalize_matmul|finalize(Kernel|_)|prepare_grouped_gemm"
_SPLIT_COLUMNS = ("flops", "bytes_moved", "precision", "cost_model", "cost_source", "cost_op_id", *_GEMM_COLUMNS,
                  "gemm_layout")


def split_unit_costs(work: pl.DataFrame, costed: pl.DataFrame) -> pl.DataFrame:
    """work: kernels (in start order) with `_unit`, `dur_ns`, `name`, `category`, `cost_op_id`; costed: per unit
    `_flops`, `_bytes`, `_precision`, `_model`, `_source`, `_flop_categories`, `_gemms`. Adds the COST columns
    that a split gives (_SPLIT_COLUMNS), computed on a narrow copy of the columns they read: joining onto the wide
    kernels table would copy every column."""
    k = work.select("_unit", "dur_ns", "name", "category", "cost_op_id").with_row_index("_pos")
    scalars = costed.select("_unit", "_flops", "_bytes", "_precision", "_model", "_source",
                            pl.col("_gemms").list.len().alias("_parts"))
    k = k.join(scalars, on="_unit", how="left", maintain_order="left")
    has = pl.col("_model").is_not_null()
    # Names are matched once each, not once a launch (a big trace repeats a few hundred names over a million rows).
    names = k.filter(has)["name"].unique()
    following = names.filter(names.str.contains(FOLLOWER_NAME) | names.str.contains(_MERGE_NAME))
    matrix_pairs = (costed.select("_unit", pl.col("_flop_categories").alias("category")).explode("category")
                    .drop_nulls().unique().with_columns(pl.lit(True).alias("_in_categories")))
    k = k.join(matrix_pairs, on=["_unit", "category"], how="left", maintain_order="left")
    follower = (pl.col("name").is_in(following.implode()) | pl.col("category").is_in(FOLLOWER_CATEGORIES)).fill_null(False)
    k = k.with_columns(follower.alias("_follower"))
    k = k.with_columns((pl.col("_in_categories").fill_null(False) & ~pl.col("_follower")).alias("_matrix"))
    unit = "_unit"
    dur = pl.col("dur_ns").cast(pl.Float64)
    flopper = (pl.when(pl.col("_matrix").any().over(unit)).then(pl.col("_matrix"))
               .when((~pl.col("_follower")).any().over(unit)).then(~pl.col("_follower")).otherwise(True))
    k = k.with_columns(pl.when(has).then(flopper).otherwise(False).alias("_flopper"))
    total = dur.sum().over(unit)
    share = pl.when(total > 0).then(dur / total).otherwise(1.0 / pl.len().over(unit))
    flop_ns = pl.when(pl.col("_flopper")).then(dur).otherwise(0.0).sum().over(unit)
    floppers = pl.col("_flopper").sum().over(unit)
    k = k.with_columns(share.alias("_share"), flop_ns.alias("_flop_ns"), floppers.alias("_floppers"))
    # Launch order among the matrix kernels, needed only by ops of several GEMMs (few rows: a window over all of
    # them would run once per unit, a hundred thousand times on a big trace).
    several = (k.filter((pl.col("_parts") > 1) & pl.col("_flopper")).select("_pos", unit)
               .with_columns((pl.int_range(pl.len()).over(unit)).cast(pl.Int64).alias("_index")))
    k = k.join(several.select("_pos", "_index"), on="_pos", how="left", maintain_order="left")
    flop_share = pl.when(pl.col("_flop_ns") > 0).then(dur / pl.col("_flop_ns")).otherwise(1.0 / pl.col("_floppers"))
    own_part = pl.col("_flopper") & (pl.col("_parts") == pl.col("_floppers")) & (pl.col("_parts") > 0)
    part_index = (pl.when(pl.col("_flopper") & (pl.col("_parts") == 1)).then(0)
                  .when(own_part).then(pl.col("_index")))
    k = k.with_columns(part_index.alias("_part"), own_part.alias("_own_part"))
    parts = (costed.select("_unit", "_gemms").filter(pl.col("_gemms").list.len() > 0)
             .with_columns(pl.int_ranges(pl.col("_gemms").list.len()).alias("_part")).explode("_gemms", "_part")
             .unnest("_gemms").rename({"m": "gemm_m", "n": "gemm_n", "k": "gemm_k", "batch": "gemm_batch",
                                       "dtypes": "gemm_dtypes"}).with_columns(pl.col("_part").cast(pl.Int64)))
    k = k.join(parts, on=["_unit", "_part"], how="left", maintain_order="left")
    part_flops = 2.0 * pl.col("gemm_m") * pl.col("gemm_n") * pl.col("gemm_k") * pl.col("gemm_batch")
    flops = (pl.when(~has).then(None)
             .when(pl.col("_own_part")).then(part_flops)
             .when(pl.col("_flopper")).then(pl.col("_flops") * flop_share).otherwise(0.0))
    split = k.sort("_pos").select(
        flops.alias("flops"),
        pl.when(has).then(pl.col("_bytes") * pl.col("_share")).alias("bytes_moved"),
        pl.when(has).then(pl.col("_precision")).alias("precision"),
        pl.when(has).then(pl.col("_model")).alias("cost_model"),
        pl.when(has).then(pl.col("_source")).alias("cost_source"),
        pl.when(has).then(pl.col("cost_op_id")).alias("cost_op_id"),
        *(pl.col(c) for c in _GEMM_COLUMNS),
        pl.lit(None, dtype=pl.String).alias("gemm_layout"),
    )
    return work.with_columns(split.get_columns())
