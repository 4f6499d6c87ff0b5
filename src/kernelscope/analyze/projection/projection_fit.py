"""Fit the projection model's factors (data/projection.toml) from measured runs, and check it: each run
projected onto the device that measured it, per phase, against its measured device time (docs/whatif.md).

Per kind of work, the model is  duration ≈ latency + max(bytes / (bandwidth · e_mem), flops / (peak · e_cmp))
with the measuring device's own ceilings. The efficiencies are searched on a logarithmic grid; for each pair the
latency that minimises the squared error is the mean residual (so the kind's total time is reproduced on the
fitting runs), floored at zero. The pair with the least squared error over every kernel wins.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from kernelscope.analyze.projection.projection import (
    GroupFactors,
    Options,
    ProjectionModel,
    Target,
    phase_projection,
    project,
)


@dataclass
class FitRun:
    """One measured run prepared for fitting: its projection inputs and its device as a target."""

    label: str
    inputs: pl.DataFrame
    target: Target
    l2_bytes: float | None


def work_at_full_efficiency(run: FitRun) -> pl.DataFrame:
    """Per modelled kernel: group, measured duration, launches, and its memory and compute time at efficiency 1
    on the run's own device (no latency), in ns; `device` names the device."""
    unit = ProjectionModel(groups={}, factors={"other": GroupFactors(0.0, 1.0, 1.0)}, fusable=(),
                           weight_bound=(), onchip_bandwidth_ratio=1.0)
    projected = project(run.inputs, run.target.changed(latency_scale=1.0), unit, Options(), run.l2_bytes)
    return projected.filter(pl.col("bound") != "carried").select(
        "group", pl.col("dur_ns").cast(pl.Float64), "memory_ns", "compute_ns",
        pl.col("instances").cast(pl.Float64), pl.lit(run.target.name).alias("device"))


@dataclass
class Fit:
    factors: dict[str, GroupFactors]
    device_latency: dict[str, float]  # device name → its per-kernel latency relative to the groups' (mean 1)


def fit_factors(runs: list[FitRun], grid_points: int = 40, efficiency_min: float = 0.05,
                efficiency_max: float = 1.5, rounds: int = 4) -> Fit:
    """Group factors, and per device a latency scale (GPUs of one architecture differ by some percent in how
    long a tiny kernel takes). Alternates: groups with the devices' scales fixed, then each device's scale in
    closed form; the scales are normalised to a geometric mean of 1."""
    samples = pl.concat([work_at_full_efficiency(r) for r in runs], how="vertical_relaxed")
    grid = np.geomspace(efficiency_min, efficiency_max, grid_points)
    devices = sorted(set(samples["device"]))
    scales = dict.fromkeys(devices, 1.0)
    factors: dict[str, GroupFactors] = {}
    for _ in range(rounds):
        scaled = samples.with_columns(
            (pl.col("instances") * pl.col("device").replace_strict(scales, return_dtype=pl.Float64)).alias("_lat"))
        factors = {group: _fit_group(rows["dur_ns"].to_numpy(), rows["memory_ns"].to_numpy(),
                                     rows["compute_ns"].to_numpy(), rows["_lat"].to_numpy(), grid)
                   for (group,), rows in scaled.group_by("group")}
        scales = _device_scales(samples, factors, devices)
    return Fit(factors=factors, device_latency={d: round(v, 4) for d, v in scales.items()})


def _device_scales(samples: pl.DataFrame, factors: dict[str, GroupFactors], devices: list[str]) -> dict[str, float]:
    table = pl.DataFrame([(g, f.latency_ns, f.memory_efficiency, f.compute_efficiency) for g, f in factors.items()],
                         schema={"group": pl.String, "_l": pl.Float64, "_em": pl.Float64, "_ec": pl.Float64},
                         orient="row")
    k = samples.join(table, on="group", how="left").with_columns(
        (pl.col("_l") * pl.col("instances")).alias("_L"),
        pl.max_horizontal(pl.col("memory_ns") / pl.col("_em"), pl.col("compute_ns") / pl.col("_ec")).alias("_W"))
    raw = {}
    for device in devices:
        d = k.filter(pl.col("device") == device)
        denominator = float((d["_L"] ** 2).sum())
        raw[device] = float((d["_L"] * (d["dur_ns"] - d["_W"])).sum()) / denominator if denominator else 1.0
    positive = [v for v in raw.values() if v > 0]
    mean = float(np.exp(np.mean(np.log(positive)))) if positive else 1.0
    return {d: (v / mean if v > 0 else 1.0) for d, v in raw.items()}


def _fit_group(y: np.ndarray, memory: np.ndarray, compute: np.ndarray, launches: np.ndarray,
               grid: np.ndarray) -> GroupFactors:
    best: tuple[float, float, float, float] | None = None
    memory_grid = grid if memory.any() else np.array([1.0])
    compute_grid = grid if compute.any() else np.array([1.0])
    for e_mem in memory_grid:
        # All compute efficiencies at once: work has shape (kernels, grid).
        work = np.maximum((memory / e_mem)[:, None], compute[:, None] / compute_grid[None, :])
        # Least-squares latency per launch for each column: Σ L (y − W) / Σ L², floored at zero.
        latency = np.maximum((launches[:, None] * (y[:, None] - work)).sum(axis=0) / (launches ** 2).sum(), 0.0)
        error = ((y[:, None] - work - latency[None, :] * launches[:, None]) ** 2).sum(axis=0)
        i = int(np.argmin(error))
        if best is None or error[i] < best[0]:
            best = (float(error[i]), float(latency[i]), float(e_mem), float(compute_grid[i]))
    assert best is not None
    return GroupFactors(latency_ns=round(best[1], 1), memory_efficiency=round(best[2], 4),
                        compute_efficiency=round(best[3], 4))


def with_fit(model: ProjectionModel, fit: Fit) -> ProjectionModel:
    """The model with the fitted factors (kinds of work not in the fitting runs keep theirs) and the fitted
    devices' latency scales."""
    return replace(model, factors={**model.factors, **fit.factors}, device_latency=dict(fit.device_latency))


def calibration_table(runs: list[FitRun], model: ProjectionModel) -> pl.DataFrame:
    """Each run projected onto its own device: per phase, measured and projected time per step and the ratio."""
    parts = []
    for run in runs:
        table = phase_projection(project(run.inputs, run.target, model, Options(), run.l2_bytes))
        parts.append(table.with_columns(pl.lit(run.label).alias("run"), pl.lit(run.target.name).alias("device")))
    return pl.concat(parts, how="vertical_relaxed").select("run", "device", "phase", "steps", "measured_per_step_ns",
                                                            "projected_per_step_ns", "ratio", "carried_pct")
