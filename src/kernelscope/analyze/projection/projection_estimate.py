"""The estimate of a measured run on another device, kernel by kernel (docs/whatif.md, "The estimate"): each kernel's
measured time times the model's ratio for that kernel (model on the target ÷ model on the measuring device), summed
per phase. A kernel the model gets wrong on the measuring device (a slow library kernel, a latency the run's own
scale over- or understates) keeps its own error, scaled by its own ratio, instead of spreading it over the phase:
a latency-bound kernel moves with the devices' per-kernel latency, a bandwidth-bound one with their bandwidth.
"""

from __future__ import annotations

import polars as pl

ROW = "_row"  # the column that pairs a row of one projection with the same row of another


def with_rows(inputs: pl.DataFrame) -> pl.DataFrame:
    """`inputs` with a row number, so that projections of them onto two devices can be paired row by row."""
    return inputs if ROW in inputs.columns else inputs.with_row_index(ROW)


def with_estimate(on_source: pl.DataFrame, on_other: pl.DataFrame) -> pl.DataFrame:
    """`on_other` (a projection of rows numbered by with_rows) with `estimate_ns`: the row's measured time × its
    projection on the other device ÷ its projection on the measuring device (`on_source`, the same rows). A row
    the model projects to nothing on the measuring device keeps its measured time; a row folded away on the other
    device (fusion) becomes 0."""
    source = on_source.select(ROW, pl.col("projected_ns").alias("_source_ns"))
    joined = on_other.join(source, on=ROW, how="left")
    ratio = pl.col("projected_ns") / pl.col("_source_ns")
    estimate = (pl.when(pl.col("_source_ns") > 0).then(pl.col("dur_ns").cast(pl.Float64) * ratio)
                .otherwise(pl.col("dur_ns").cast(pl.Float64)))
    return joined.with_columns(estimate.alias("estimate_ns")).drop("_source_ns")


def phase_estimates(estimated: pl.DataFrame, steps: dict[str, int]) -> pl.DataFrame:
    """Per phase: the estimate's device time per step (`estimate_ns`) of rows from with_estimate."""
    totals = estimated.group_by("phase").agg(pl.col("estimate_ns").sum())
    count = pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Float64)
    return totals.with_columns(pl.col("estimate_ns") / count)
