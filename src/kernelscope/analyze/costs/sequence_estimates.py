"""Costs of kernels whose launch record the trace left out, estimated from the kernel sequence.

A kernel without a launch record has no op, no shapes and no grid: neither its op nor its twins (the same kernel
with the same grid, analyze/costs/kernel_extras.py) can cost it. A model's forward pass runs the same kernels in the same
order layer after layer and step after step, so such a kernel takes the median cost of the costed launches of the
same kernel between the same neighbours on its stream: the same `2·WIDTH` kernels around it, else fewer (down to one
on each side), else, where every costed launch of the kernel has one and the same cost, that cost. Launches that
match but disagree (bytes or FLOPs more than SPREAD apart: projections of two sizes between the same kernels) leave
the kernel uncosted; a narrower match would only be less specific. Labelled `estimated`.
"""

from __future__ import annotations

import polars as pl

WIDTH = 3  # kernels compared on each side, the widest context tried first
SPREAD = 1.25  # the most the matching launches' costs may differ (largest ÷ smallest) for their median to stand
_COPIED = ("flops", "bytes_moved", "precision", "cost_model", "gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes")


def _context(width: int) -> list[pl.Expr]:
    by = ["device", "stream"]
    h = pl.col("_h")
    return [h.shift(s).over(by).alias(f"_c{s}") for s in range(-width, width + 1) if s]


def _agree(column: str, spread: float) -> pl.Expr:
    """The matching launches' values differ by at most `spread` (largest ÷ smallest; zeros and nulls agree only with
    their like)."""
    c = pl.col(column).fill_null(0.0)
    return ((c.max() <= c.min() * spread) & ((c.min() > 0) | (c.max() == 0))).fill_null(False)


def estimated_from_sequence(k: pl.DataFrame) -> pl.DataFrame:
    """Costs for kernels without a cost and without launch geometry (module docstring)."""
    if not k.height or "grid_x" not in k.columns:
        return k
    kernel = (pl.col("kind") == "kernel").fill_null(False)
    missing = kernel & pl.col("cost_model").is_null() & pl.col("grid_x").is_null()
    if not k.select(missing.any()).item():
        return k
    work = (k.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_seq_row"), pl.col("name").hash().alias("_h"))
            .sort("device", "stream", "start_ns", nulls_last=True))
    found = pl.DataFrame(schema={"_seq_row": pl.Int64})
    settled = pl.Series("_seq_row", [], dtype=pl.Int64)  # estimated, or matched by launches that disagree
    for width in range(WIDTH, -1, -1):
        keys = ["_h", *(f"_c{s}" for s in range(-width, width + 1) if s)]
        ctx = work.with_columns(_context(width)) if width else work
        known = ctx.filter(kernel & pl.col("cost_model").is_not_null() & pl.all_horizontal(pl.col(keys).is_not_null()))
        agg = known.group_by(keys).agg(
            pl.col("flops").median(), pl.col("bytes_moved").median(),
            _agree("bytes_moved", SPREAD if width else 1.0).alias("_b_ok"),
            _agree("flops", SPREAD if width else 1.0).alias("_f_ok"),
            pl.col("precision").mode().sort().first(), pl.col("cost_model").mode().sort().first(),
            *(pl.when(pl.col(c).n_unique() == 1).then(pl.col(c).first()).alias(c)
              for c in ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes")))
        todo = ctx.filter(missing & ~pl.col("_seq_row").is_in(settled.implode()))
        matched = todo.select("_seq_row", *keys).join(agg, on=keys, how="inner").drop(keys)
        settled = pl.concat([settled, matched["_seq_row"]])
        hit = matched.filter(pl.col("_b_ok") & pl.col("_f_ok")).drop("_b_ok", "_f_ok")
        found = pl.concat([found, hit], how="diagonal_relaxed") if found.height else hit
    if not found.height:
        return k
    found = found.rename({c: f"_e_{c}" for c in _COPIED})
    out = k.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_seq_row")).join(
        found, on="_seq_row", how="left", maintain_order="left")
    use = pl.col("_e_cost_model").is_not_null()
    return out.with_columns(
        *(pl.when(use).then(pl.col(f"_e_{c}")).otherwise(pl.col(c)).alias(c) for c in _COPIED),
        pl.when(use).then(pl.lit("estimated")).otherwise(pl.col("cost_source")).alias("cost_source"),
    ).drop("_seq_row", pl.selectors.starts_with("_e_"))
