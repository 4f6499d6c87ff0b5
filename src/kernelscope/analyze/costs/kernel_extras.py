"""Costs a kernel's own launch record gives (copies, sets, collectives), costs estimated from identical launches,
and the layout of GEMM kernels from their names (analyze/costs/kernel_costs.py calls these in order)."""

from __future__ import annotations

import re
from functools import cache

import polars as pl

from kernelscope.analyze.ranks.communication import DTYPE_BYTES as MESSAGE_DTYPE_BYTES
from kernelscope.load import knowledge

_GEOMETRY = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def copy_costs(k: pl.DataFrame) -> pl.DataFrame:
    """Memcpy and memset rows cost their own bytes (a device-to-device copy reads and writes them)."""
    copy_bytes = (
        pl.when(pl.col("kind") == "memset").then(pl.col("bytes").cast(pl.Float64))
        .when(pl.col("name").str.contains("DtoD")).then(2.0 * pl.col("bytes").cast(pl.Float64))
        .otherwise(pl.col("bytes").cast(pl.Float64))
    )
    is_copy = pl.col("kind").is_in(["memcpy", "memset"])
    return k.with_columns(
        pl.when(is_copy).then(0.0).otherwise(pl.col("flops")).alias("flops"),
        pl.when(is_copy).then(copy_bytes).otherwise(pl.col("bytes_moved")).alias("bytes_moved"),
        pl.when(is_copy).then(pl.lit("fp32")).otherwise(pl.col("precision")).alias("precision"),
        pl.when(is_copy).then(pl.col("kind")).otherwise(pl.col("cost_model")).alias("cost_model"),
        pl.when(is_copy).then(pl.lit("kernel_metadata")).otherwise(pl.col("cost_source")).alias("cost_source"),
        pl.when(is_copy).then(None).otherwise(pl.col("cost_op_id")).alias("cost_op_id"),
    )


def collective_costs(k: pl.DataFrame) -> pl.DataFrame:
    """A collective kernel whose launch records its messages (torch ≥ 2.4 NCCL kernels: elements in and out, and
    their dtype) costs this GPU's own memory traffic: its input read once and its output written once. The links'
    traffic is the communication section's (docs/multi-gpu.md)."""
    if "msg_in_elems" not in k.columns or k["msg_in_elems"].is_null().all():
        return k
    elem = pl.col("msg_dtype").replace_strict(MESSAGE_DTYPE_BYTES, default=None, return_dtype=pl.Float64)
    nbytes = (pl.col("msg_in_elems").fill_null(0) + pl.col("msg_out_elems").fill_null(0)).cast(pl.Float64) * elem
    known = (pl.col("kind") == "kernel") & nbytes.is_not_null() & (nbytes > 0)
    return k.with_columns(
        pl.when(known).then(0.0).otherwise(pl.col("flops")).alias("flops"),
        pl.when(known).then(nbytes).otherwise(pl.col("bytes_moved")).alias("bytes_moved"),
        pl.when(known).then(pl.lit("fp32")).otherwise(pl.col("precision")).alias("precision"),
        pl.when(known).then(pl.lit("collective")).otherwise(pl.col("cost_model")).alias("cost_model"),
        pl.when(known).then(pl.lit("kernel_metadata")).otherwise(pl.col("cost_source")).alias("cost_source"),
    )


def estimated_from_twins(k: pl.DataFrame) -> pl.DataFrame:
    """A kernel without a cost takes the median cost of the costed launches of the same kernel with the same grid
    and block (its launch geometry follows from the problem's size), labelled `estimated`: kernels whose launch
    record a trace left out, replays no capture describes. Where the kernel's own op recorded its input shapes
    (`_op_dims`, when present), only twins whose ops recorded the same shapes count: a gather's grid follows its
    output, not the table it reads."""
    missing = (pl.col("cost_model").is_null() & (pl.col("kind") == "kernel")).fill_null(False)
    if not k.height or not k.select(missing.any()).item():
        return k
    if "_op_dims" not in k.columns:
        return _from_twins(k, missing, _GEOMETRY)
    shaped = pl.col("_op_dims").is_not_null() & (pl.col("_op_dims").str.len_bytes() > 2)
    k = _from_twins(k, missing & shaped, [*_GEOMETRY, "_op_dims"])
    return _from_twins(k, (pl.col("cost_model").is_null() & (pl.col("kind") == "kernel")).fill_null(False) & ~shaped,
                       _GEOMETRY)


def _from_twins(k: pl.DataFrame, missing: pl.Expr, key: list[str]) -> pl.DataFrame:
    if not k.select(missing.any()).item():
        return k
    twins = (k.filter(pl.col("cost_model").is_not_null() & (pl.col("kind") == "kernel"))
             .group_by(key)
             .agg(pl.col("flops").median().alias("_t_flops"), pl.col("bytes_moved").median().alias("_t_bytes"),
                  pl.col("precision").mode().sort().first().alias("_t_precision"),
                  pl.col("cost_model").mode().sort().first().alias("_t_model"),
                  *(pl.when(pl.col(c).n_unique() == 1).then(pl.col(c).first()).alias(f"_t_{c}")
                    for c in ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes"))))
    if not twins.height:
        return k
    k = k.join(twins, on=key, how="left", maintain_order="left", nulls_equal=True)
    use = missing & pl.col("_t_model").is_not_null()
    return k.with_columns(
        pl.when(use).then(pl.col("_t_flops")).otherwise(pl.col("flops")).alias("flops"),
        pl.when(use).then(pl.col("_t_bytes")).otherwise(pl.col("bytes_moved")).alias("bytes_moved"),
        pl.when(use).then(pl.col("_t_precision")).otherwise(pl.col("precision")).alias("precision"),
        pl.when(use).then(pl.col("_t_model")).otherwise(pl.col("cost_model")).alias("cost_model"),
        pl.when(use).then(pl.lit("estimated")).otherwise(pl.col("cost_source")).alias("cost_source"),
        *(pl.when(use).then(pl.col(f"_t_{c}")).otherwise(pl.col(c)).alias(c)
          for c in ("gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes")),
    ).drop(pl.selectors.starts_with("_t_"))


@cache
def _layout_rules() -> tuple[tuple[re.Pattern[str], dict[str, str]], ...]:
    return tuple((re.compile(r["pattern"]), dict(r.get("map", {}))) for r in knowledge.cost_models().get("layout", []))


@cache
def gemm_layout(name: str) -> str | None:
    """The transposes of A and B a GEMM kernel's name states (data/cost_models.toml [[layout]]), e.g. `TN`."""
    for pattern, mapping in _layout_rules():
        found = pattern.search(name)
        if found:
            a, b = (mapping.get(found.group(g), found.group(g)) for g in ("a", "b"))
            return f"{a}{b}"
    return None


def gemm_layouts(k: pl.DataFrame) -> pl.DataFrame:
    names = k.filter(pl.col("gemm_m").is_not_null())["name"].unique().to_list()
    if not names:
        return k
    layouts = {n: gemm_layout(n) for n in names}
    return k.with_columns(pl.when(pl.col("gemm_m").is_not_null())
                          .then(pl.col("name").replace_strict(layouts, default=None, return_dtype=pl.String))
                          .alias("gemm_layout"))
