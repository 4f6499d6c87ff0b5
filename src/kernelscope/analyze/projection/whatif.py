"""A what-if study of one run on one target (docs/whatif.md): calibration on the measuring device, the projection
per phase and kind of work, what each design option buys, the bandwidth and compute that latency goals need,
and sweeps. Pure tables from projection.py's model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.costs.naming import kernel_labels
from kernelscope.analyze.projection.parallel_projection import (
    ParallelProjection,
    ParallelRequest,
    parallel_settings,
    project_parallel,
)
from kernelscope.analyze.projection.projection import (
    AlikeRows,
    Options,
    ProjectionModel,
    Target,
    group_projection,
    merge_alike,
    merge_kernel_launches,
    phase_projection,
    phase_times,
    project,
    requirement_solver,
    sweep,
)
from kernelscope.analyze.projection.projection_estimate import phase_estimates, with_estimate, with_rows
from kernelscope.analyze.projection.projection_fit import with_run_latency
from kernelscope.analyze.projection.projection_model import estimate_spread
from kernelscope.analyze.ranks.communication import communication
from kernelscope.analyze.structure.phases import step_counts
from kernelscope.analyze.wide_tables import as_codes, as_text
from kernelscope.contracts.run_info import RunInfo
from kernelscope.load import knowledge


def whatif_settings() -> dict[str, Any]:
    return knowledge.whatif_settings()


@dataclass(frozen=True)
class MeasuredLatency:
    """What the run measured around its kernels: TPOT, TTFT and the host time per decode step."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    host_ms: float | None = None


@dataclass
class WhatIf:
    source: Target  # the device that measured the run
    target: Target
    options: Options
    calibration: pl.DataFrame  # per phase: the run projected onto its own device
    phases: pl.DataFrame  # per phase: measured, model on source, model on target, estimate, speed-up
    groups: pl.DataFrame  # per phase and kind of work on the target
    kernels: pl.DataFrame  # per phase and kernel name on the target
    scenarios: pl.DataFrame  # what each design option buys (decode and prefill per step)
    requirements: pl.DataFrame  # latency goal → bandwidth / compute needed on the target
    sweeps: pl.DataFrame  # parameter, value, phase, group, projected_per_step_ns
    # As is (measured), the target's hardware alone, the design options alone (on the measuring device) and both:
    # scenario, phase, per_step_ns, speedup (against as is), carried_pct; the summary's first table.
    headline: pl.DataFrame = field(default_factory=pl.DataFrame)
    timings: MeasuredLatency = field(default_factory=lambda: MeasuredLatency())
    parallel: ParallelProjection | None = None  # --set ranks=N / link=…: the run on N ranks
    # Relative width of the estimates' range (projection_model.estimate_spread): 0 on the measuring device, None
    # where the model ships no held-out spread.
    spread: float | None = None
    # Joules per token on the target and the calibration against the run's measured energy (commands/whatif_energy:
    # StudyEnergy); None where nothing asks for energy.
    energy: Any = None


def what_if(inputs: pl.DataFrame, source: Target, target: Target, model: ProjectionModel, options: Options,
            source_l2_bytes: float | None, info: RunInfo,
            sweeps: list[tuple[str, list[float]]] | None = None, parallel: ParallelRequest | None = None) -> WhatIf:
    settings = whatif_settings()
    steps = step_counts(inputs)  # once: every per-step table divides by them
    # Every table below is a sum per phase, kind of work or kernel name: projected from the launches of each name
    # that project alike, one row each.
    merged = with_rows(merge_kernel_launches(inputs))
    source, target = with_run_latency(merged, source, target, model, steps)
    on_source = project(merged, source, model, Options(), source_l2_bytes, steps)
    # The run on its own device (the report's what-if) is projected once.
    same = target == source and options == Options()
    on_target = on_source if same else project(merged, target, model, options, source_l2_bytes, steps)
    calibration = phase_projection(on_source, steps)
    spread = estimate_spread(model, source, target)
    estimates = phase_estimates(with_estimate(on_source, on_target), steps)
    phases = _with_range(_phase_table(calibration, calibration if same else phase_projection(on_target, steps),
                                      estimates), spread)
    timings = _timings(info, calibration)
    alike = merge_alike(merged, steps)  # scenarios, requirements and sweeps project the run many times
    requirements = _requirements(alike, target, model, options, source_l2_bytes, phases, settings)
    chosen = sweeps if sweeps is not None else default_sweeps(target, settings)
    sweep_tables = [sweep(alike, target, model, options, parameter, values, source_l2_bytes,
                          phases=(ranges.DECODE, ranges.PREFILL))
                    for parameter, values in chosen]
    return WhatIf(
        source=source, target=target, options=options, calibration=calibration, phases=phases,
        groups=group_projection(on_target, steps), kernels=_kernel_table(on_target, settings["kernels"]["top"], steps),
        scenarios=_scenarios(alike, target, model, options, source_l2_bytes, settings),
        requirements=requirements,
        sweeps=pl.concat(sweep_tables, how="vertical_relaxed") if sweep_tables else pl.DataFrame(),
        timings=timings, spread=spread,
        headline=_headline(merged, source, target, model, options, source_l2_bytes, steps, calibration, on_source,
                           on_target if not same else on_source),
        parallel=(_parallel(inputs, source, target, model, options, source_l2_bytes, steps, parallel, settings)
                  if parallel is not None else None),
    )


def _parallel(inputs: pl.DataFrame, source: Target, target: Target, model: ProjectionModel, options: Options,
              source_l2_bytes: float | None, steps: dict[str, int], request: ParallelRequest,
              settings: dict[str, Any]) -> ParallelProjection | None:
    """The run on request.target_ranks ranks; None when it has no collectives matched across ranks. Projected
    launch by launch: a collective's instances are matched across ranks."""
    comm = communication(inputs)
    if comm is None or comm.instances.height == 0:
        return None
    on_source = project(inputs, source, model, Options(), source_l2_bytes, steps)
    same = target == source and options == Options()
    on_target = on_source if same else project(inputs, target, model, options, source_l2_bytes, steps)
    knobs = parallel_settings(settings.get("parallel") or {})
    if request.hop_latency_ns is not None:
        knobs = replace(knobs, hop_latency_ns=request.hop_latency_ns)
    return project_parallel(inputs, on_source, on_target, comm.instances, request.target_ranks,
                            request.source_link, request.target_link, knobs)


def _phase_table(calibration: pl.DataFrame, target: pl.DataFrame, estimates: pl.DataFrame) -> pl.DataFrame:
    """measured (on the source), model on source and on target, and the estimate for the target: each kernel's
    measured time times the model's target/source ratio for it (projection_estimate), so the model's error on the
    measuring device cancels kernel by kernel; the speed-up is measured ÷ estimate."""
    cal = calibration.select("phase", "steps", "measured_per_step_ns",
                             pl.col("projected_per_step_ns").alias("source_model_ns"),
                             pl.col("ratio").alias("calibration_ratio"))
    tgt = target.select("phase", pl.col("projected_per_step_ns").alias("target_model_ns"), "carried_pct")
    return (cal.join(tgt, on="phase", how="left", maintain_order="left")
            .join(estimates, on="phase", how="left", maintain_order="left")
            .with_columns((pl.col("measured_per_step_ns") / pl.col("estimate_ns")).alias("speedup")))


def _with_range(phases: pl.DataFrame, spread: float | None) -> pl.DataFrame:
    """The estimate's range: estimate × e^∓spread, the spread of the model's held-out projections (None: no range
    shipped, the columns are null)."""
    factor = math.exp(spread) if spread is not None else None
    low = pl.col("estimate_ns") / factor if factor else pl.lit(None, dtype=pl.Float64)
    high = pl.col("estimate_ns") * factor if factor else pl.lit(None, dtype=pl.Float64)
    return phases.with_columns(low.alias("estimate_low_ns"), high.alias("estimate_high_ns"))


AS_IS, HARDWARE, OPTIONS, BOTH = "as is", "hardware", "options", "hardware and options"


def _headline(merged: pl.DataFrame, source: Target, target: Target, model: ProjectionModel, options: Options,
              source_l2_bytes: float | None, steps: dict[str, int], calibration: pl.DataFrame,
              on_source: pl.DataFrame, on_target: pl.DataFrame) -> pl.DataFrame:
    """What the run takes as measured, and what the model makes of it on the target's hardware alone, with the
    design options alone (on the measuring device) and with both (the study's target): per step of each phase,
    each kernel's measured time scaled by the model's ratio for it, as the phase table's estimate."""
    base = calibration.select("phase", "measured_per_step_ns", pl.col("projected_per_step_ns").alias("model_ns"))
    hardware_only = target != source
    with_options = options != Options()
    scenarios = [(AS_IS, None)]
    if hardware_only:
        scenarios.append((HARDWARE, (target, Options())))
    if with_options:
        scenarios.append((OPTIONS, (source, options)))
    if hardware_only and with_options:
        scenarios.append((BOTH, None))  # the study's own target, projected already
    parts = []
    for name, setting in scenarios:
        if name == AS_IS:
            projected = calibration.select("phase", pl.col("projected_per_step_ns").alias("scenario_ns"),
                                           pl.lit(0.0).alias("carried_pct"))
        else:
            on = (on_target if setting is None or (hardware_only != with_options)
                  else project(merged, *setting[:1], model, setting[1], source_l2_bytes, steps))
            # Kernel by kernel, the measured time times the model's ratio (projection_estimate).
            estimated = phase_estimates(with_estimate(on_source, on), steps)
            projected = phase_projection(on, steps).select("phase", "carried_pct").join(
                estimated.select("phase", pl.col("estimate_ns").alias("scenario_ns")), on="phase", how="left")
        parts.append(base.join(projected, on="phase", how="inner").select(
            pl.lit(name).alias("scenario"), "phase",
            pl.col("scenario_ns").alias("per_step_ns") if name != AS_IS else pl.col("measured_per_step_ns")
            .alias("per_step_ns"),
            (pl.col("measured_per_step_ns") / pl.col("scenario_ns")).alias("speedup") if name != AS_IS
            else pl.lit(1.0).alias("speedup"), "carried_pct"))
    return pl.concat(parts, how="vertical_relaxed").filter(pl.col("phase") != ranges.UNKNOWN)


def _timings(info: RunInfo, calibration: pl.DataFrame) -> MeasuredLatency:
    """Measured TPOT and TTFT and the host time around the kernels (TPOT minus decode device time per step):
    what a target would add on top of its device time if the host side stayed as it was."""
    plain = info.plain_timings
    decode = calibration.filter(pl.col("phase") == ranges.DECODE)
    host = None
    if plain.tpot_ms is not None and decode.height:
        host = max(plain.tpot_ms - decode["measured_per_step_ns"][0] / 1e6, 0.0)
    return MeasuredLatency(tpot_ms=plain.tpot_ms, ttft_ms=plain.ttft_ms, host_ms=host)


# A projection this far from the measured time (either way) comes with the reason the model gives for it.
FAR = 2.0


def _kernel_table(projected: pl.DataFrame, top: int, steps: dict[str, int] | None = None) -> pl.DataFrame:
    """Per phase and kernel name on the target: the projection and its terms (per step: latency, memory and
    compute terms, bytes and FLOPs; per launch: the fitted latency; the efficiencies of its kind of work), the
    report's label of the kernel (names sharing a friendly name numbered #2, #3 as in the main report), and
    `why` where the projection is more than FAR× from the measured time: "latency" when the kind's fitted
    per-kernel latency decides it, "memory" or "compute" when that term does."""
    counts = step_counts(projected) if steps is None else steps
    steps = pl.DataFrame({"phase": list(counts), "steps": list(counts.values())},
                         schema={"phase": pl.String, "steps": pl.Int64})
    labels = _labels(projected)
    per_step = ["latency_ns", "memory_ns", "compute_ns", "bytes_projected", "flops"]
    table = (
        projected.with_columns(as_codes("name")).group_by("phase", "name")
        .agg(pl.col("friendly_name").first(), pl.col("group").first(), pl.col("instances").sum().alias("launches"),
             pl.col("dur_ns").sum().cast(pl.Float64).alias("measured_ns"), pl.col("projected_ns").sum(),
             pl.col("latency_per_launch_ns").first(),
             pl.col("memory_efficiency").first(), pl.col("compute_efficiency").first(),
             *(pl.col(c).cast(pl.Float64).sum().alias(c) for c in per_step))
        .with_columns(as_text("name"))
        .join(_most_common_bound(projected), on=["phase", "name"], how="left")
        .join(steps, on="phase")
        .join(labels, on="name", how="left")
        .with_columns((pl.col("measured_ns") / pl.col("steps")).alias("measured_per_step_ns"),
                      (pl.col("projected_ns") / pl.col("steps")).alias("projected_per_step_ns"),
                      (pl.col("launches") / pl.col("steps")).alias("launches_per_step"),
                      (pl.col("measured_ns") / pl.col("launches")).alias("measured_per_launch_ns"),
                      *((pl.col(c) / pl.col("steps")).alias(f"{c.removesuffix('_ns')}_per_step" + ("_ns" if c.endswith("_ns") else ""))
                        for c in per_step))
    )
    ratio = pl.col("projected_ns") / pl.col("measured_ns")
    far = (ratio > FAR) | (ratio < 1 / FAR)
    table = table.with_columns(
        pl.when(far & pl.col("bound").is_in(["latency", "memory", "compute"])).then(pl.col("bound")).alias("why"))
    return (
        table.sort("phase", "projected_per_step_ns", descending=[False, True])
        .group_by("phase", maintain_order=True).head(top)
        .select("phase", "name", "friendly_name", "label", "group", "launches_per_step", "measured_per_step_ns",
                "projected_per_step_ns", "latency_per_step_ns", "memory_per_step_ns", "compute_per_step_ns",
                "bytes_projected_per_step", "flops_per_step", "latency_per_launch_ns", "measured_per_launch_ns",
                "memory_efficiency", "compute_efficiency", "bound", "why")
    )


def _most_common_bound(projected: pl.DataFrame) -> pl.DataFrame:
    """Per phase and kernel name, the bound most of its launch rows have (merged rows count as the rows they stand
    for, `launch_rows`); of bounds held equally often, the first by name."""
    rows = pl.col("launch_rows") if "launch_rows" in projected.columns else pl.lit(1)
    return (projected.group_by("phase", "name", "bound").agg(rows.sum().alias("_rows"))
            .sort("phase", "name", "_rows", "bound", descending=[False, False, True, False])
            .group_by("phase", "name", maintain_order=True).first().drop("_rows"))


def _labels(kernels: pl.DataFrame) -> pl.DataFrame:
    """name → the report's label (analyze/costs/naming.kernel_labels: #2, #3 for names sharing a friendly name)."""
    columns = ["name", "dur_ns", "friendly_name", "library", "category", "description"]
    frame = kernels.select(c if c in kernels.columns else pl.lit(None, dtype=pl.String).alias(c) for c in columns)
    return kernel_labels(frame).select("name", "label")


def _scenarios(inputs: AlikeRows, target: Target, model: ProjectionModel, options: Options,
               source_l2: float | None, settings: dict[str, Any]) -> pl.DataFrame:
    """The target as given, then each design option alone on top of it (data/whatif.toml [[scenarios]]):
    decode and prefill time per step and the speed-up over the target as given."""
    rows = []
    base: dict[str, float] = {}
    subset = inputs.of_phases([ranges.DECODE, ranges.PREFILL])  # one projection a scenario
    for scenario in [{"name": "as given", "what": "nothing: the baseline the speed-ups divide"}, *settings["scenarios"]]:
        varied, opts = _apply(target, options, scenario)
        every = phase_times(subset, varied, model, opts, source_l2)
        times = {p: every[p] for p in (ranges.DECODE, ranges.PREFILL) if p in every}
        if not base:
            base = times
        # An option the target already has (--set fuse=yes, weight_bits=8) buys nothing on top of it: the row
        # says so instead of printing 1.00×.
        applied = bool(base is not times and (("fuse" in scenario and options.fuse) or
                       ("weight_bits" in scenario and options.weight_bits == int(scenario["weight_bits"]))))
        rows.append({"scenario": scenario["name"], "what": scenario.get("what", ""), "applied": applied,
                     "decode_ns": times.get(ranges.DECODE), "prefill_ns": times.get(ranges.PREFILL),
                     "decode_speedup": None if applied else _ratio(base.get(ranges.DECODE), times.get(ranges.DECODE)),
                     "prefill_speedup": None if applied else _ratio(base.get(ranges.PREFILL), times.get(ranges.PREFILL))})
    return pl.DataFrame(rows, schema={"scenario": pl.String, "what": pl.String, "applied": pl.Boolean,
                                      "decode_ns": pl.Float64, "prefill_ns": pl.Float64,
                                      "decode_speedup": pl.Float64, "prefill_speedup": pl.Float64})


def _apply(target: Target, options: Options, scenario: dict[str, Any]) -> tuple[Target, Options]:
    varied = target
    if "sram_bytes" in scenario:
        varied = varied.changed(sram_bytes=varied.sram_bytes + float(scenario["sram_bytes"]))
    if "latency_scale" in scenario:
        varied = varied.changed(latency_scale=varied.latency_scale * float(scenario["latency_scale"]))
    if "bandwidth_scale" in scenario:
        varied = varied.changed(bandwidth=varied.bandwidth * float(scenario["bandwidth_scale"]))
    if "compute_scale" in scenario:
        varied = varied.changed(flops={k: v * float(scenario["compute_scale"]) for k, v in varied.flops.items()})
    opts = Options(fuse=bool(scenario.get("fuse", options.fuse)),
                   weight_bits=int(scenario.get("weight_bits", options.weight_bits)))
    return varied, opts


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _requirements(inputs: AlikeRows, target: Target, model: ProjectionModel, options: Options,
                  source_l2: float | None, phases: pl.DataFrame, settings: dict[str, Any]) -> pl.DataFrame:
    """Per latency goal: the DRAM bandwidth needed with the target's compute, the compute needed with its
    bandwidth (peaks of every precision scaled together; the bf16 value is shown), and the floor below which
    neither alone gets (per-kernel latency and the other term). Goals are device time per step (decode: TPOT
    when the host keeps up, e.g. with graphs; prefill: TTFT)."""
    rows = []
    for phase, goals in ((ranges.DECODE, settings["requirements"]["tpot_ms"]),
                         (ranges.PREFILL, settings["requirements"]["ttft_ms"])):
        if not inputs.rows.filter(pl.col("phase") == phase).height:
            continue
        current = phases.filter(pl.col("phase") == phase)["target_model_ns"]
        on_bandwidth = requirement_solver(inputs, target, model, options, phase, "bandwidth", source_l2)
        on_compute = requirement_solver(inputs, target, model, options, phase, "bf16", source_l2)
        for goal_ms in goals:
            goal = goal_ms * 1e6
            bandwidth, bw_floor = on_bandwidth(goal)
            compute, cmp_floor = on_compute(goal)
            rows.append({"phase": phase, "goal_ms": goal_ms,
                         "projected_ms": float(current[0]) / 1e6 if current.len() else None,
                         "bandwidth_needed": bandwidth, "bandwidth_floor_ms": bw_floor / 1e6,
                         "bf16_needed": compute, "compute_floor_ms": cmp_floor / 1e6})
    return pl.DataFrame(rows, schema={"phase": pl.String, "goal_ms": pl.Float64, "projected_ms": pl.Float64,
                                      "bandwidth_needed": pl.Float64, "bandwidth_floor_ms": pl.Float64,
                                      "bf16_needed": pl.Float64, "compute_floor_ms": pl.Float64})


def default_sweeps(target: Target, settings: dict[str, Any]) -> list[tuple[str, list[float]]]:
    """Bandwidth and bf16 compute from `low` to `high` times the target's, on a logarithmic grid."""
    cfg = settings["sweeps"]
    factors = [cfg["low"] * (cfg["high"] / cfg["low"]) ** (i / (cfg["points"] - 1)) for i in range(cfg["points"])]
    out = [("bandwidth", [target.bandwidth * f for f in factors])]
    if target.flops.get("bf16"):
        out.append(("bf16", [target.flops["bf16"] * f for f in factors]))
    return out


def dominant_groups(sweeps: pl.DataFrame, count: int = 2) -> pl.DataFrame:
    """Per sweep point: the phase's total, and its `count` largest kinds of work with their shares (columns
    group_1, pct_1, group_2, pct_2, …)."""
    if sweeps.height == 0:
        return pl.DataFrame()
    keys = ["parameter", "value", "phase"]
    totals = sweeps.group_by(keys, maintain_order=True).agg(pl.col("projected_per_step_ns").sum().alias("total_ns"))
    ranked = (sweeps.join(totals, on=keys)
              .with_columns((100 * pl.col("projected_per_step_ns") / pl.col("total_ns")).alias("pct"))
              .sort([*keys, "pct"], descending=[False, False, False, True])
              .with_columns(pl.int_range(1, pl.len() + 1).over(keys).alias("_rank"))
              .filter(pl.col("_rank") <= count))
    out = totals
    for rank in range(1, count + 1):
        part = ranked.filter(pl.col("_rank") == rank).select(
            *keys, pl.col("group").alias(f"group_{rank}"), pl.col("pct").alias(f"pct_{rank}"))
        out = out.join(part, on=keys, how="left")
    return out.sort("parameter", "phase", "value")


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
