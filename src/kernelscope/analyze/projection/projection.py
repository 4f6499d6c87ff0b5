"""Project a measured run onto other hardware, including hardware that does not exist yet (docs/whatif.md).

Every kernel with a cost model gets a projected duration on a target:

    projected = latency_ns · latency_scale + max(bytes / (bandwidth · memory_efficiency),
                                               flops / (peak[precision] · compute_efficiency))

with the factors of its kind of work (data/projection.toml, fitted from measured runs by `kernelscope hw fit`).
Kernels without a cost model keep their measured duration ("carried"). What a target does differently: fuse
element-wise chains into their producers, narrower weights, on-chip capacity (SRAM, a larger L2) that holds the
weights and KV cache a decode step re-reads, a smaller per-kernel latency (graphs, a megakernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.projection.projection_model import (  # noqa: F401 (the model's names, imported from here too)
    GroupFactors,
    Options,
    ProjectionModel,
    Target,
    default_model,
    parse_model,
    target_from_ceilings,
)
from kernelscope.analyze.structure.phases import ordered_phases, step_counts
from kernelscope.analyze.wide_tables import as_codes, as_text, text_columns

BOUNDS = ["memory", "compute", "latency", "carried", "fused"]


def projection_inputs(kernels: pl.DataFrame, ncu: pl.DataFrame | None, model: ProjectionModel) -> pl.DataFrame:
    """The run's kernels with their kind of work (`group`), the bytes the projection uses (`bytes_used`:
    Nsight Compute's DRAM bytes where it measured the same phase, name and launch configuration, else the
    analytic bytes; `bytes_source` says which) and whether a cost model covers them (`modelled`)."""
    k = kernels.with_columns(
        pl.col("category").fill_null("other").replace_strict(model.groups, default="other").alias("group"))
    k = k.with_columns(pl.col("bytes_moved").alias("bytes_used"),
                       pl.when(pl.col("bytes_moved").is_not_null()).then(pl.lit("analytic")).alias("bytes_source"))
    config = ["phase", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    if ncu is not None and ncu.height and "dram_bytes" in ncu.columns and all(c in ncu.columns for c in config):
        measured = (ncu.filter(pl.col("dram_bytes").is_not_null() & pl.col("name").is_not_null())
                    .group_by(config).agg(pl.col("dram_bytes").mean().alias("_ncu_bytes")))
        k = k.join(measured, on=config, how="left", nulls_equal=True).with_columns(
            pl.coalesce("_ncu_bytes", "bytes_used").alias("bytes_used"),
            pl.when(pl.col("_ncu_bytes").is_not_null()).then(pl.lit("ncu")).otherwise(pl.col("bytes_source"))
            .alias("bytes_source"),
        ).drop("_ncu_bytes")
    modelled = pl.col("bytes_used").is_not_null() | (pl.col("flops").fill_null(0) > 0)
    return k.with_columns(modelled.alias("modelled"))


@dataclass(frozen=True)
class AlikeRows:
    """Projection inputs with the rows that project alike merged (merge_alike), and the steps per phase of the rows
    before merging: per-step times divide by these."""

    rows: pl.DataFrame
    steps: dict[str, int]

    def of_phases(self, phases: list[str]) -> AlikeRows:
        return AlikeRows(self.rows.filter(pl.col("phase").is_in(phases)), self.steps)


# Rows equal in these project alike: every term of `project` is then proportional to their bytes, FLOPs, launches
# and measured time, so one row holding their sums projects to the sum of their projections, and what bounds it is
# what bounds each of them.
_ALIKE = ["phase", "group", "precision", "modelled", "bytes_used", "flops", "instances"]


def merge_alike(inputs: pl.DataFrame | AlikeRows, steps: dict[str, int] | None = None) -> AlikeRows:
    """`inputs` (projection_inputs) with the rows that project alike merged: the same phase totals, kinds of work and
    bounds from far fewer rows (a few hundred for a trace of 100k launches), for what projects a run many times
    (scenarios, requirements, sweeps). steps: step_counts(inputs), where the caller has it."""
    if isinstance(inputs, AlikeRows):
        return inputs
    return AlikeRows(_merged(inputs, _ALIKE), step_counts(inputs) if steps is None else steps)


_SUMMED = ("bytes_used", "flops", "instances")  # keys of _ALIKE that a merged row holds the sums of


def _merged(inputs: pl.DataFrame, keys: list[str], *extra: pl.Expr, in_order: bool = False) -> pl.DataFrame:
    """The rows equal in `keys` as one: sums of bytes, FLOPs, launches and measured time, the first start (the
    phases' order) and `extra`. Keys are grouped as copies, so that the summed ones can be summed."""
    first = [pl.col("start_ns").min()] if "start_ns" in inputs.columns else []
    # Text keys as category codes: grouped by several keys, Polars copies each row's keys into one buffer, and
    # kernel names run to hundreds of characters (665 MB and half of this step's time at 1.5 million launches).
    text = text_columns(inputs, keys)
    codes = dict(zip(text, as_codes(*text), strict=True))
    return (inputs.with_columns(codes.get(c, pl.col(c)).alias(f"_{c}") for c in keys)
            .group_by([f"_{c}" for c in keys], maintain_order=in_order)
            .agg(*(pl.col(c).sum() for c in (*_SUMMED, "dur_ns")), *first, *extra)
            .rename({f"_{c}": c for c in keys if c not in _SUMMED})
            .drop(f"_{c}" for c in _SUMMED)
            .with_columns(as_text(*text)))


# Columns of a kernel name the what-if's kernel table and labels read: the same for every launch of the name.
_NAME_COLUMNS = ("friendly_name", "library", "category", "description")


def merge_kernel_launches(inputs: pl.DataFrame) -> pl.DataFrame:
    """`inputs` (projection_inputs) with the launches of a kernel name that project alike merged into one row (the
    sums of their bytes, FLOPs, launches and measured time; `launch_rows`: how many rows it stands for): every
    per-phase, per-kind and per-name total of a projection is the same from these rows, and a trace of a million
    launches projects a few thousand rows. Rows merge in the order they first appear, so a name's first row (its
    friendly name, library) is the one it was."""
    carried = [pl.col(c).first() for c in _NAME_COLUMNS if c in inputs.columns]
    return _merged(inputs, [*_ALIKE, "name"], *carried, pl.len().alias("launch_rows"), in_order=True)


def project(inputs: pl.DataFrame, target: Target, model: ProjectionModel, options: Options | None = None,
            source_l2_bytes: float | None = None, steps: dict[str, int] | None = None) -> pl.DataFrame:
    """Per kernel: latency_ns, memory_ns, compute_ns, projected_ns and what bounds it (`bound`). `inputs` comes
    from projection_inputs. source_l2_bytes: the L2 of the measured device; a target with more L2 (or any
    SRAM) holds that much more of the weights and KV cache a decode step re-reads. steps: per phase, where
    `inputs` are merged rows (merge_alike). The factors are those of the target's device family where the model
    has them (ProjectionModel.factors_for)."""
    options = options or Options()
    factors = pl.DataFrame(
        [(g, f.latency_ns, f.memory_efficiency, f.compute_efficiency)
         for g, f in model.factors_for(target.family).items()],
        schema={"group": pl.String, "_lat": pl.Float64, "_em": pl.Float64, "_ec": pl.Float64}, orient="row")
    peaks = pl.DataFrame({"precision": list(target.flops), "_peak": list(target.flops.values())},
                         schema={"precision": pl.String, "_peak": pl.Float64})
    other = model.factors_for(target.family).get("other") or model.factors_of("other")
    k = (inputs.join(factors, on="group", how="left", maintain_order="left")
         .with_columns(pl.col("_lat").fill_null(other.latency_ns), pl.col("_em").fill_null(other.memory_efficiency),
                       pl.col("_ec").fill_null(other.compute_efficiency))
         .join(peaks, on="precision", how="left", maintain_order="left"))
    if "tf32" not in target.flops and target.flops.get("fp32"):
        k = k.with_columns(pl.when(pl.col("precision") == "tf32").then(pl.lit(target.flops["fp32"]))
                           .otherwise(pl.col("_peak")).alias("_peak"))
    # A precision the target does not list (a spec giving only bf16 and fp8): the nearest one it has, so that
    # FP32 element-wise work on an accelerator spec is still projected (it is memory- or latency-bound anyway).
    fallback = next((target.flops[p] for p in ("fp32", "tf32", "bf16", "fp16", "fp8") if target.flops.get(p)), None)
    if fallback is not None:
        k = k.with_columns(pl.col("_peak").fill_null(fallback))
    weight_bound = pl.col("group").is_in(list(model.weight_bound))
    byte_scale = options.weight_bits / 16.0
    bytes_now = pl.when(pl.col("group") == "matmul").then(pl.col("bytes_used") * byte_scale).otherwise(
        pl.col("bytes_used")).fill_null(0.0)
    k = k.with_columns(bytes_now.alias("_bytes"))
    resident = _resident_share(k, target, source_l2_bytes, weight_bound, steps)
    onchip_bw = target.onchip_bandwidth or target.bandwidth * model.onchip_bandwidth_ratio
    in_decode = pl.col("phase") == ranges.DECODE
    share = pl.when(weight_bound & in_decode).then(pl.lit(resident)).otherwise(0.0)
    memory_ns = 1e9 * (pl.col("_bytes") * (1 - share) / (target.bandwidth * pl.col("_em"))
                       + pl.col("_bytes") * share / (onchip_bw * pl.col("_em")))
    compute_ns = pl.when(pl.col("flops").fill_null(0) > 0).then(
        1e9 * pl.col("flops") / (pl.col("_peak") * pl.col("_ec"))).otherwise(0.0)
    if target.kind_latency:  # the device's per-kernel latency differs by kind of work (projection_kinds)
        k = k.with_columns(pl.col("_lat") * pl.col("group").replace_strict(
            target.kind_latency, default=1.0, return_dtype=pl.Float64))
    latency_ns = pl.col("_lat") * target.latency_scale * pl.col("instances")
    k = k.with_columns(memory_ns.alias("memory_ns"), compute_ns.alias("compute_ns"), latency_ns.alias("latency_ns"))
    # A precision the target has no peak for cannot be projected: the kernel keeps its measured time.
    projectable = pl.col("modelled") & ~((pl.col("flops").fill_null(0) > 0) & pl.col("_peak").is_null())
    fused = pl.lit(options.fuse) & pl.col("group").is_in(list(model.fusable)) & pl.col("modelled")
    work = pl.max_horizontal("memory_ns", "compute_ns")
    projected = (pl.when(fused).then(0.0)
                 .when(projectable).then(pl.col("latency_ns") + work)
                 .otherwise(pl.col("dur_ns").cast(pl.Float64)))
    bound = (pl.when(fused).then(pl.lit("fused"))
             .when(~projectable).then(pl.lit("carried"))
             .when(pl.col("latency_ns") >= work).then(pl.lit("latency"))
             .when(pl.col("memory_ns") >= pl.col("compute_ns")).then(pl.lit("memory"))
             .otherwise(pl.lit("compute")))
    # The terms stay with each kernel, so a report can show how its projection was made.
    return k.with_columns(projected.alias("projected_ns"), bound.alias("bound"),
                          (pl.col("_lat") * target.latency_scale).alias("latency_per_launch_ns"),
                          pl.col("_em").alias("memory_efficiency"), pl.col("_ec").alias("compute_efficiency"),
                          pl.col("_bytes").alias("bytes_projected")).drop("_lat", "_em", "_ec", "_peak", "_bytes")


def _resident_share(k: pl.DataFrame, target: Target, source_l2: float | None, weight_bound: pl.Expr,
                    steps: dict[str, int] | None) -> float:
    """Share of the decode step's re-read bytes (weights, KV cache) that the added on-chip capacity holds."""
    extra = target.sram_bytes + max(0.0, (target.l2_bytes or 0.0) - (source_l2 or target.l2_bytes or 0.0))
    if extra <= 0:
        return 0.0
    in_decode = pl.col("phase") == ranges.DECODE
    decode_steps = (step_counts(k.filter(in_decode)) if steps is None else steps).get(ranges.DECODE, 0)
    decode = k.filter(in_decode & weight_bound)
    per_step = float(decode["_bytes"].sum()) / decode_steps if decode_steps else 0.0
    return min(1.0, extra / per_step) if per_step > 0 else 0.0


def phase_projection(projected: pl.DataFrame, steps: dict[str, int] | None = None) -> pl.DataFrame:
    """Per phase: measured and projected device time per step, their ratio, and the share of projected time
    that is carried over unmodelled. steps: step_counts(projected), where the caller has it."""
    steps = step_counts(projected) if steps is None else steps
    table = projected.group_by("phase").agg(
        pl.col("dur_ns").sum().cast(pl.Float64).alias("measured_ns"),
        pl.col("projected_ns").sum(),
        pl.col("projected_ns").filter(pl.col("bound") == "carried").sum().alias("carried_ns"),
    )
    table = table.with_columns(pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Int64).alias("steps"))
    return _ordered(projected, table.with_columns(
        (pl.col("measured_ns") / pl.col("steps")).alias("measured_per_step_ns"),
        (pl.col("projected_ns") / pl.col("steps")).alias("projected_per_step_ns"),
        (pl.col("projected_ns") / pl.col("measured_ns")).alias("ratio"),
        (100.0 * pl.col("carried_ns") / pl.col("projected_ns")).alias("carried_pct"),
    ).select("phase", "steps", "measured_per_step_ns", "projected_per_step_ns", "ratio", "carried_pct"))


def group_projection(projected: pl.DataFrame, steps: dict[str, int] | None = None) -> pl.DataFrame:
    """Per phase and kind of work: measured and projected time per step, and how the projected time splits
    into what bounds it. steps: per phase, where `projected` is of merged rows (merge_alike)."""
    steps = step_counts(projected) if steps is None else steps
    table = (
        projected.group_by("phase", "group")
        .agg(pl.col("dur_ns").sum().cast(pl.Float64).alias("measured_ns"), pl.col("projected_ns").sum(),
             *(pl.col("projected_ns").filter(pl.col("bound") == b).sum().alias(f"{b}_ns") for b in BOUNDS
               if b != "fused"),
             # A fused kernel's projection is 0: the column says what fusion removed, its measured time.
             pl.col("dur_ns").filter(pl.col("bound") == "fused").sum().cast(pl.Float64).alias("fused_ns"),
             pl.col("instances").sum().alias("launches"))
        .with_columns(pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Int64).alias("steps"))
    )
    per_step = [(pl.col(c) / pl.col("steps")).alias(c.replace("_ns", "_per_step_ns"))
                for c in ["measured_ns", "projected_ns", *(f"{b}_ns" for b in BOUNDS)]]
    table = table.with_columns(*per_step, (pl.col("launches") / pl.col("steps")).alias("launches_per_step"))
    table = table.with_columns(
        (100.0 * pl.col("projected_ns") / pl.col("projected_ns").sum().over("phase")).alias("projected_pct"))
    keep = ["phase", "group", "launches_per_step", "measured_per_step_ns", "projected_per_step_ns", "projected_pct",
            *(f"{b}_per_step_ns" for b in BOUNDS)]
    rank = _phase_rank(projected)
    return table.select(keep).sort([rank, "projected_per_step_ns"], descending=[False, True])


def phase_time(inputs: pl.DataFrame, target: Target, model: ProjectionModel, options: Options, phase: str,
               source_l2_bytes: float | None) -> float:
    """Projected device time per step of one phase (ns)."""
    return phase_times(inputs.filter(pl.col("phase") == phase), target, model, options, source_l2_bytes)[phase]


def phase_times(inputs: pl.DataFrame | AlikeRows, target: Target, model: ProjectionModel, options: Options,
                source_l2_bytes: float | None) -> dict[str, float]:
    """Projected device time per step of every phase (ns), from one projection."""
    alike = merge_alike(inputs)
    projected = project(alike.rows, target, model, options, source_l2_bytes, alike.steps)
    totals = projected.group_by("phase").agg(pl.col("projected_ns").sum())
    return {phase: float(total) / alike.steps.get(phase, 1) for phase, total in totals.iter_rows()}


def sweep(inputs: pl.DataFrame | AlikeRows, target: Target, model: ProjectionModel, options: Options, parameter: str,
          values: list[float], source_l2_bytes: float | None, phases: tuple[str, ...] = (ranges.DECODE,)) -> pl.DataFrame:
    """For each value of `parameter` (a Target field, or a precision's peak): projected time per step per phase
    and kind of work. Rows: parameter, value, phase, group, projected_per_step_ns, plus the phase's total."""
    rows = []
    subset = merge_alike(inputs).of_phases(list(phases))
    for value in values:
        varied = vary(target, parameter, value)
        groups = group_projection(project(subset.rows, varied, model, options, source_l2_bytes, subset.steps),
                                  subset.steps)
        for row in groups.iter_rows(named=True):
            rows.append((parameter, value, row["phase"], row["group"], row["projected_per_step_ns"]))
    return pl.DataFrame(rows, schema={"parameter": pl.String, "value": pl.Float64, "phase": pl.String,
                                      "group": pl.String, "projected_per_step_ns": pl.Float64}, orient="row")


def vary(target: Target, parameter: str, value: float) -> Target:
    """The target with one quantity set: bandwidth, l2_bytes, sram_bytes, onchip_bandwidth, latency_scale, or the
    peak of a precision (bf16, fp8, …)."""
    if parameter in ("bandwidth", "l2_bytes", "sram_bytes", "onchip_bandwidth", "latency_scale"):
        return target.changed(**{parameter: value})
    return target.changed(flops={**target.flops, parameter: value})


def requirement(inputs: pl.DataFrame, target: Target, model: ProjectionModel, options: Options, phase: str,
                goal_ns: float, parameter: str, source_l2_bytes: float | None) -> tuple[float | None, float]:
    """The smallest value of `parameter` ("bandwidth", or a precision: all compute peaks scaled together) for
    which the phase's projected time per step reaches goal_ns, and the floor no value of it goes below (the
    other terms). None when the goal is under the floor."""
    return requirement_solver(inputs, target, model, options, phase, parameter, source_l2_bytes)(goal_ns)


def requirement_solver(inputs: pl.DataFrame | AlikeRows, target: Target, model: ProjectionModel, options: Options,
                       phase: str, parameter: str, source_l2_bytes: float | None):
    """requirement() for many goals of one phase and quantity: the projection is made once, each goal then
    solved on its terms (goal_ns → (value needed or None, floor))."""
    alike = merge_alike(inputs).of_phases([phase])
    projected = project(alike.rows, target, model, options, source_l2_bytes, alike.steps)
    steps = alike.steps.get(phase, 1)
    scaled = projected.filter(pl.col("bound").is_in(["memory", "compute", "latency"]))
    fixed = float(projected.filter(~pl.col("bound").is_in(["memory", "compute", "latency"]))["projected_ns"].sum())
    latency = float(scaled["latency_ns"].sum())
    memory, compute = scaled["memory_ns"].to_numpy(), scaled["compute_ns"].to_numpy()
    on_bandwidth = parameter == "bandwidth"

    def at(scale: float) -> float:
        # The time per step when the swept quantity is `scale` times the target's: only its term shrinks.
        work = np.maximum(memory / scale, compute) if on_bandwidth else np.maximum(memory, compute / scale)
        return (fixed + latency + float(work.sum())) / steps

    floor = at(math.inf)

    def solve(goal_ns: float) -> tuple[float | None, float]:
        if floor > goal_ns:
            return None, floor
        lo, hi = 1e-9, 1.0
        while at(hi) > goal_ns:
            hi *= 2
        for _ in range(200):  # the time falls monotonically as the quantity grows: bisect on a log scale
            mid = math.sqrt(lo * hi)
            if at(mid) <= goal_ns:
                hi = mid
            else:
                lo = mid
            if hi / lo < 1.0001:
                break
        return _value(target, parameter, hi), floor

    return solve


def _value(target: Target, parameter: str, scale: float) -> float:
    if parameter == "bandwidth":
        return target.bandwidth * scale
    return (target.flops.get(parameter) or 0.0) * scale


def _phase_rank(kernels: pl.DataFrame) -> pl.Expr:
    """The report's phase order (model stages as they first ran, then prefill, decode, unknown) as a sort key."""
    first = dict(kernels.group_by("phase").agg(pl.col("start_ns").min()).iter_rows()) if "start_ns" in kernels.columns \
        else dict.fromkeys(kernels["phase"].unique().to_list())
    order = {name: i for i, name in enumerate(ordered_phases(list(first), first))}
    return pl.col("phase").replace_strict(order, default=len(order), return_dtype=pl.Int64)


def _ordered(kernels: pl.DataFrame, table: pl.DataFrame) -> pl.DataFrame:
    return table.with_columns(_phase_rank(kernels).alias("_r")).sort("_r").drop("_r")
