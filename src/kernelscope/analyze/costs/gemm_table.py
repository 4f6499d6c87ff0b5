"""The GEMM shape table of a phase: every matrix problem the run solved (M, N, K, batch, dtypes, layout), with its
launches, time, achieved TFLOP/s, share of the roof at its intensity, the roofline class that holds most of its
time, and the module it serves (layer numbers folded: `model.layers.*.mlp.down_proj`). The shapes come from the
kernels' cost columns (analyze/costs/kernel_costs.py: op shapes, capture shapes, the model's config)."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.hardware import Ceilings
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.wide_tables import as_codes, as_text

KEYS = ["gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes", "gemm_layout", "module_pattern"]
_LAYER_NUMBER = r"(^|\.)\d+(\.|$)"


def module_pattern(module: pl.Expr) -> pl.Expr:
    """A module name with its layer number folded into `*` (one row for every layer's copy of a GEMM)."""
    return module.str.replace_all(_LAYER_NUMBER, "$1*$2")


def gemm_shape_table(kernels: pl.DataFrame, ceilings: Ceilings | None) -> pl.DataFrame | None:
    """One row per distinct problem (KEYS), largest total time first; None when no kernel carries a GEMM shape.
    kernels: one phase's, placed on the roofline (roofline_class) where the device has ceilings."""
    read = ["gemm_m", "gemm_n", "gemm_k", "gemm_batch", "gemm_dtypes", "gemm_layout", "module", "dur_ns", "flops",
            "bytes_moved", "precision", "roofline_class", "instances", "cost_source"]
    gemms = (kernels.select(c for c in read if c in kernels.columns).filter(pl.col("gemm_m").is_not_null())
             .with_columns(module_pattern(pl.col("module")).alias("module_pattern")))
    if not gemms.height:
        return None
    if "roofline_class" not in gemms.columns:
        gemms = gemms.with_columns(pl.lit("unclassified").alias("roofline_class"))
    gemms = gemms.with_columns(as_codes("gemm_dtypes", "gemm_layout", "module_pattern"))
    dominant = (gemms.group_by(*KEYS, "roofline_class").agg(pl.col("dur_ns").sum().alias("_t"))
                .sort(["_t", "roofline_class"], descending=[True, False]).unique(KEYS, keep="first")
                .select(*KEYS, "roofline_class"))
    table = (gemms.group_by(KEYS).agg(
        launch_count().alias("count"), pl.col("dur_ns").sum().alias("total_ns"), pl.col("flops").sum(),
        pl.col("bytes_moved").sum(), pl.col("precision").first(), pl.col("cost_source").mode().sort().first())
        .join(dominant, on=KEYS, how="left", nulls_equal=True))
    seconds = pl.col("total_ns") / 1e9
    table = table.with_columns(
        (pl.col("flops") / seconds / 1e12).alias("achieved_tflops"),
        (pl.col("flops") / pl.col("bytes_moved")).alias("intensity"),
        _roof_pct(ceilings).alias("roof_pct"),
        *as_text("gemm_dtypes", "gemm_layout", "module_pattern"),
    )
    total = float(kernels["dur_ns"].sum() or 1)
    return (table.with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
            .rename({"gemm_m": "m", "gemm_n": "n", "gemm_k": "k", "gemm_batch": "batch", "gemm_dtypes": "dtypes",
                     "gemm_layout": "layout", "module_pattern": "module"})
            .select("m", "n", "k", "batch", "dtypes", "layout", "count", "total_ns", "time_pct", "flops",
                    "bytes_moved", "intensity", "achieved_tflops", "roof_pct", "roofline_class", "precision",
                    "module", "cost_source")
            .sort(["total_ns", "m", "n", "k", "module"], descending=[True, False, False, False, False],
                  nulls_last=True))


def _roof_pct(ceilings: Ceilings | None) -> pl.Expr:
    """Achieved FLOP/s over the roof at the problem's intensity, min(peak of its precision, intensity × bandwidth);
    null without ceilings or a peak for its precision."""
    if ceilings is None or not ceilings.bandwidth:
        return pl.lit(None, dtype=pl.Float64)
    peak = pl.col("precision").replace_strict(ceilings.flops, default=None, return_dtype=pl.Float64)
    roof = pl.min_horizontal(peak, pl.col("flops") / pl.col("bytes_moved") * ceilings.bandwidth)
    return pl.when(peak.is_not_null()).then(100.0 * (pl.col("flops") / (pl.col("total_ns") / 1e9)) / roof)
