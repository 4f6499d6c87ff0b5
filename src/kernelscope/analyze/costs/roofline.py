"""Place kernels on the roofline of their device and classify them.

Per kernel (with a cost model): arithmetic intensity = FLOPs / bytes; achieved FLOP/s and bytes/s over its
duration; compute_roof_pct and memory_roof_pct (achieved over each peak); the roof at its intensity,
min(peak FLOP/s, intensity · bandwidth), and roof_pct = achieved FLOP/s (or bytes/s for zero-FLOP kernels)
over that roof. Class (docs/roofline.md):
  memory-bound   roof_pct ≥ approach_pct and intensity below the ridge point
  compute-bound  roof_pct ≥ approach_pct and intensity at or above the ridge point
  latency-bound  neither roof approached and shorter than latency_ns
  under-utilised neither roof approached, longer than that: too little parallelism, stalls or a slow
                 implementation (a kernel neither memory nor compute holds back)
  unclassified   no cost model, or no ceiling for its precision
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kernelscope.analyze.hardware import Ceilings, classification_rule
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.wide_tables import as_codes, as_text, time_where
from kernelscope.contracts.tables import INSTANCES

UNDER_UTILISED = "under-utilised"
CLASSES = ["memory-bound", "compute-bound", UNDER_UTILISED, "latency-bound", "unclassified"]


def place_on_roofline(kernels: pl.DataFrame, ceilings: Ceilings | None) -> pl.DataFrame:
    """kernels must carry flops, bytes_moved and precision (analyze.costs.kernel_costs)."""
    rule = classification_rule()
    if ceilings is None or not ceilings.bandwidth:
        return kernels.with_columns(
            *(pl.lit(None, dtype=pl.Float64).alias(c) for c in _METRICS), pl.lit("unclassified").alias("roofline_class")
        )
    # Each launch's peak looked up by precision (an expression: a join would copy every column of the wide table).
    peak = pl.col("precision").replace_strict(ceilings.flops, default=None, return_dtype=pl.Float64)
    seconds = pl.col("dur_ns") / 1e9
    bw = ceilings.bandwidth
    achieved_flops = pl.col("flops") / seconds
    achieved_bytes = pl.col("bytes_moved") / seconds
    # The intermediates (peak, achieved rates, the roof at the kernel's intensity) live only for the steps below.
    k = kernels.with_columns(
        (pl.col("flops") / pl.col("bytes_moved")).alias("arithmetic_intensity"),
        peak.alias("_peak"), achieved_flops.alias("_achieved_flops"), achieved_bytes.alias("_achieved_bytes"),
    )
    k = k.with_columns(
        (100 * pl.col("_achieved_flops") / pl.col("_peak")).alias("compute_roof_pct"),
        (100 * pl.col("_achieved_bytes") / bw).alias("memory_roof_pct"),
        pl.min_horizontal(pl.col("_peak"), pl.col("arithmetic_intensity") * bw).alias("_roof_flops"),
    )
    attained = (
        pl.when(pl.col("flops") > 0)
        .then(100 * pl.col("_achieved_flops") / pl.col("_roof_flops"))
        .otherwise(pl.col("memory_roof_pct"))
    )
    k = k.with_columns(attained.alias("roof_pct"))
    # A kernel without FLOPs needs only the bandwidth roof; one with FLOPs needs its precision's peak too.
    has_peak = pl.col("_peak").is_not_null() | (pl.col("flops").fill_null(0) == 0)
    known = pl.col("bytes_moved").is_not_null() & (pl.col("bytes_moved") > 0) & has_peak
    compute_side = pl.col("arithmetic_intensity") >= pl.col("_peak") / bw  # at or above the ridge point
    approached = pl.col("roof_pct") >= rule["approach_pct"]
    cls = (
        pl.when(~known).then(pl.lit("unclassified"))
        .when(approached & compute_side).then(pl.lit("compute-bound"))
        .when(approached).then(pl.lit("memory-bound"))
        .when(pl.col("dur_ns") < rule["latency_ns"]).then(pl.lit("latency-bound"))
        .otherwise(pl.lit(UNDER_UTILISED))
    )
    return k.with_columns(cls.alias("roofline_class")).drop("_peak", "_achieved_flops", "_achieved_bytes",
                                                            "_roof_flops")


@dataclass(frozen=True)
class MissingCeiling:
    """A roof the device lacks although the run's kernels need it: 'bandwidth' or a precision key."""

    quantity: str
    time_ns: float  # device time of the costed kernels that need it
    share: float  # of the run's device time


def missing_ceilings(kernels: pl.DataFrame, ceilings: Ceilings | None) -> list[MissingCeiling]:
    """Which roofs the run needs (costed kernels: bandwidth; kernels with FLOPs: their precision's peak) and the
    device's ceilings do not give, largest time first."""
    # The four columns read, before filtering: a filter copies every column of the wide kernels table.
    costed = kernels.select("dur_ns", "bytes_moved", "flops", "precision").filter(
        pl.col("bytes_moved").is_not_null() & (pl.col("bytes_moved") > 0))
    total = float(kernels["dur_ns"].sum() or 0)
    if not costed.height or not total:
        return []
    missing = []
    if ceilings is None or not ceilings.bandwidth:
        missing.append(MissingCeiling("bandwidth", float(costed["dur_ns"].sum()), float(costed["dur_ns"].sum()) / total))
    computing = costed.filter((pl.col("flops").fill_null(0) > 0) & pl.col("precision").is_not_null())
    by_precision = (computing.group_by("precision").agg(pl.col("dur_ns").sum())
                    .sort(["dur_ns", "precision"], descending=[True, False]))
    for precision, time_ns in by_precision.iter_rows():
        if ceilings is None or ceilings.peak(precision) is None:
            missing.append(MissingCeiling(precision, float(time_ns), float(time_ns) / total))
    return missing


# The per-launch metrics a placed kernels table carries (None where there is no roofline).
_METRICS = ["arithmetic_intensity", "compute_roof_pct", "memory_roof_pct", "roof_pct"]


def class_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per class: kernel launches, distinct kernels, device time and its share, the mean launch duration, and
    per-class means of the metrics the trace supports (the means weight every kernels row equally)."""
    total = kernels["dur_ns"].sum() or 1
    table = kernels.group_by("roofline_class").agg(
        launch_count().alias("launches"),
        pl.col("name").n_unique().alias("kernels"),
        pl.col("dur_ns").sum().alias("total_ns"),
        (pl.col("dur_ns").sum() / launch_count()).alias("mean_duration_ns"),
        pl.col("compute_roof_pct").mean().alias("mean_compute_roof_pct"),
        pl.col("memory_roof_pct").mean().alias("mean_memory_roof_pct"),
        pl.col("arithmetic_intensity").median().alias("median_arithmetic_intensity"),
        pl.col("est_occupancy_pct").mean().alias("mean_est_occupancy_pct"),
        pl.col("registers_per_thread").mean().alias("mean_registers_per_thread"),
    ).with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
    order = {c: i for i, c in enumerate(CLASSES)}
    return (
        table.with_columns(pl.col("roofline_class").replace_strict(order, default=len(order)).alias("_o"))
        .sort("_o").drop("_o")
    )


def cost_coverage(kernels: pl.DataFrame) -> float:
    total = kernels["dur_ns"].sum()
    if not total:
        return 0.0
    return float(time_where(kernels, pl.col("cost_model").is_not_null()) / total)


def kernel_points(kernels: pl.DataFrame, group_column: str) -> pl.DataFrame:
    """One roofline point per kernel name: totals of FLOPs, bytes and time, the rates they imply, the class
    that holds most of its time, and a group (category) for colouring."""
    # Only the columns read; names as codes for the two group-bys and the join, text again at the end.
    read = ["name", "roofline_class", "dur_ns", "flops", "bytes_moved", INSTANCES, group_column, "precision",
            "cost_source"]
    placed = (kernels.select(c for c in dict.fromkeys(read) if c in kernels.columns)
              .filter(pl.col("bytes_moved").is_not_null() & (pl.col("bytes_moved") > 0))
              .with_columns(as_codes("name")))
    dominant = (
        placed.group_by("name", "roofline_class").agg(pl.col("dur_ns").sum().alias("_t"))
        .sort(["_t", "roofline_class"], descending=[True, False]).unique("name", keep="first")
        .select("name", "roofline_class")
    )
    return (
        placed.group_by("name")
        .agg(
            pl.col("flops").sum(), pl.col("bytes_moved").sum(), pl.col("dur_ns").sum(), launch_count().alias("launches"),
            pl.col(group_column).first().alias("group"), pl.col("precision").first(),
            *([pl.col("cost_source").mode().sort().first()] if "cost_source" in placed.columns else []),
        )
        .join(dominant, on="name", how="left")
        .with_columns(
            (pl.col("flops") / pl.col("bytes_moved")).alias("intensity"),
            # A kernel recorded with no duration has no rate (null, never infinite).
            pl.when(pl.col("dur_ns") > 0).then(pl.col("flops") / (pl.col("dur_ns") / 1e9)).alias("flops_per_s"),
            pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes_moved") / (pl.col("dur_ns") / 1e9)).alias("bytes_per_s"),
            *as_text("name"),
        )
        .sort(["dur_ns", "name"], descending=[True, False])  # ties in a fixed order: the same report every time
    )


def kernel_roofline_table(points: pl.DataFrame, ceilings: Ceilings) -> pl.DataFrame:
    """Per kernel name: intensity, achieved rates and their share of the roofs of its device."""
    peaks = pl.DataFrame({"precision": list(ceilings.flops), "peak": list(ceilings.flops.values())},
                         schema={"precision": pl.String, "peak": pl.Float64})
    table = points.join(peaks, on="precision", how="left").with_columns(
        (100 * pl.col("flops_per_s") / pl.col("peak")).alias("compute_roof_pct"),
        (100 * pl.col("bytes_per_s") / ceilings.bandwidth).alias("memory_roof_pct"),
        (pl.col("peak") / ceilings.bandwidth).alias("ridge_intensity"),
    ).drop("peak")
    # Kernels whose intensity puts them under the compute roof but that reach less than half of it.
    far = (pl.col("intensity") >= pl.col("ridge_intensity")) & (pl.col("compute_roof_pct") < 50)
    return table.with_columns(far.fill_null(False).alias("compute_side_far"))
