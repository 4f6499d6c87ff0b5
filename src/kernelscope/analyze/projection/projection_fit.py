"""Fit the projection model's factors (data/projection.toml) from measured runs, and check it: each run
projected onto the device that measured it, per phase, against its measured device time (docs/whatif.md).

Per kind of work, the model is  duration ≈ latency + max(bytes / (bandwidth · e_mem), flops / (peak · e_cmp))
with the measuring device's own ceilings. The efficiencies are searched on a logarithmic grid; for each pair the
latency that minimises the squared error is the mean residual (so the kind's total time is reproduced on the
fitting runs), floored at zero. The pair with the least squared error over every kernel wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
from kernelscope.analyze.projection.projection_check import ALL, measured_per_step
from kernelscope.analyze.projection.projection_kinds import Side, fit_device_kinds, side
from kernelscope.analyze.projection.projection_pairs import scales_from_pairs, with_roofs


@dataclass
class FitRun:
    """One measured run prepared for fitting: its projection inputs and its device as a target."""

    label: str
    inputs: pl.DataFrame
    target: Target
    l2_bytes: float | None
    family: str | None = None  # the device's architecture (data/hardware.toml)
    device: str | None = None  # the key of its device in the model's tables: the spec's name (default: target's)

    @property
    def key(self) -> str:
        return self.device or self.target.name


def work_at_full_efficiency(run: FitRun) -> pl.DataFrame:
    """Per modelled kernel: group, measured duration, launches, and its memory and compute time at efficiency 1
    on the run's own device (no latency), in ns; `device` names the device."""
    unit = ProjectionModel(groups={}, factors={"other": GroupFactors(0.0, 1.0, 1.0)}, fusable=(),
                           weight_bound=(), onchip_bandwidth_ratio=1.0)
    projected = project(run.inputs, run.target.changed(latency_scale=1.0), unit, Options(), run.l2_bytes)
    # Each phase's measured device time (every kernel, modelled or not): a relative fit weighs its kernels by it.
    phase_total = pl.col("dur_ns").cast(pl.Float64).sum().over("phase")
    return projected.with_columns(phase_total.alias("phase_ns")).filter(pl.col("bound") != "carried").select(
        "group", pl.col("dur_ns").cast(pl.Float64), "memory_ns", "compute_ns",
        pl.col("instances").cast(pl.Float64), pl.lit(run.key).alias("device"), pl.lit(run.label).alias("run"),
        "phase_ns")


@dataclass
class Fit:
    factors: dict[str, GroupFactors]
    device_latency: dict[str, float]  # device name → its per-kernel latency relative to the groups' (mean 1)
    run_latency: dict[str, float] = field(default_factory=dict)  # run label → its scale (scale_by="run")


def fit_factors(runs: list[FitRun], grid_points: int = 40, efficiency_min: float = 0.05,
                efficiency_max: float = 1.5, rounds: int = 4, relative: bool = False, device_scales: bool = True,
                scale_by: str = "device") -> Fit:
    """Group factors, and per device a latency scale (GPUs of one architecture differ by some percent in how
    long a tiny kernel takes). Alternates: groups with the devices' scales fixed, then each device's scale in
    closed form; the scales are normalised to a geometric mean of 1. relative: each kernel's error counts as a
    share of its phase's measured time (its run's prefill, decode, forward pass), so that every phase of every run
    weighs alike; otherwise in nanoseconds, where the longest runs decide the fit. scale_by="run": a latency scale per
    run instead (what differs between runs of one device: software, workload), returned as `run_latency`."""
    samples = _merged_samples(pl.concat([work_at_full_efficiency(r) for r in runs], how="vertical_relaxed"),
                              relative)
    grid = np.geomspace(efficiency_min, efficiency_max, grid_points)
    devices = sorted(set(samples[scale_by]))
    scales = dict.fromkeys(devices, 1.0)
    factors: dict[str, GroupFactors] = {}
    for _ in range(rounds):
        scaled = samples.with_columns(
            (pl.col("instances") * pl.col(scale_by).replace_strict(scales, return_dtype=pl.Float64)).alias("_lat"))
        factors = {group: _fit_group(rows["dur_ns"].to_numpy(), rows["memory_ns"].to_numpy(),
                                     rows["compute_ns"].to_numpy(), rows["_lat"].to_numpy(), grid,
                                     rows["_w"].to_numpy())
                   for (group,), rows in scaled.group_by("group")}
        if not device_scales:
            break
        scales = _device_scales(samples, factors, devices, scale_by)
    rounded = {d: round(v, 4) for d, v in scales.items()}
    if scale_by == "run":
        return Fit(factors=factors, device_latency={}, run_latency=rounded)
    return Fit(factors=factors, device_latency=rounded)


def _merged_samples(samples: pl.DataFrame, relative: bool) -> pl.DataFrame:
    """Kernels equal in everything but their measured duration as one row: the mean duration, weighted by how many
    they are (`_w`; relative: over their phase's measured time squared). The weighted squared error of the means
    differs from the squared error over every kernel by a constant (the spread within each row), so the fit is the
    same, from a few hundred rows instead of 10⁵."""
    norm = (1.0 / pl.col("phase_ns") ** 2) if relative else pl.lit(1.0)
    keys = ["group", "memory_ns", "compute_ns", "instances", "device", "run", "_norm"]
    return (samples.with_columns(norm.alias("_norm")).group_by(keys)
            .agg(pl.col("dur_ns").mean(), pl.len().cast(pl.Float64).alias("_n"))
            .with_columns((pl.col("_n") * pl.col("_norm")).alias("_w")).sort(keys))


def _device_scales(samples: pl.DataFrame, factors: dict[str, GroupFactors], devices: list[str],
                   key: str = "device") -> dict[str, float]:
    table = pl.DataFrame([(g, f.latency_ns, f.memory_efficiency, f.compute_efficiency) for g, f in factors.items()],
                         schema={"group": pl.String, "_l": pl.Float64, "_em": pl.Float64, "_ec": pl.Float64},
                         orient="row")
    k = samples.join(table, on="group", how="left").with_columns(
        (pl.col("_l") * pl.col("instances")).alias("_L"),
        pl.max_horizontal(pl.col("memory_ns") / pl.col("_em"), pl.col("compute_ns") / pl.col("_ec")).alias("_W"))
    raw = {}
    for device in devices:
        d = k.filter(pl.col(key) == device)
        denominator = float((d["_w"] * d["_L"] ** 2).sum())
        raw[device] = float((d["_w"] * d["_L"] * (d["dur_ns"] - d["_W"])).sum()) / denominator if denominator else 1.0
    positive = [v for v in raw.values() if v > 0]
    mean = float(np.exp(np.mean(np.log(positive)))) if positive else 1.0
    return {d: (v / mean if v > 0 else 1.0) for d, v in raw.items()}


def _fit_group(y: np.ndarray, memory: np.ndarray, compute: np.ndarray, launches: np.ndarray,
               grid: np.ndarray, weights: np.ndarray | None = None) -> GroupFactors:
    w = np.ones_like(y) if weights is None else weights
    best: tuple[float, float, float, float] | None = None
    memory_grid = grid if memory.any() else np.array([1.0])
    compute_grid = grid if compute.any() else np.array([1.0])
    for e_mem in memory_grid:
        # All compute efficiencies at once: work has shape (kernels, grid).
        work = np.maximum((memory / e_mem)[:, None], compute[:, None] / compute_grid[None, :])
        # Least-squares latency per launch for each column: Σ w L (y − W) / Σ w L², floored at zero.
        latency = np.maximum(((w * launches)[:, None] * (y[:, None] - work)).sum(axis=0) / (w * launches ** 2).sum(),
                             0.0)
        error = (w[:, None] * (y[:, None] - work - latency[None, :] * launches[:, None]) ** 2).sum(axis=0)
        i = int(np.argmin(error))
        if best is None or error[i] < best[0]:
            best = (float(error[i]), float(latency[i]), float(e_mem), float(compute_grid[i]))
    assert best is not None
    return GroupFactors(latency_ns=round(best[1], 1), memory_efficiency=round(best[2], 4),
                        compute_efficiency=round(best[3], 4))


def fit_model(runs: list[FitRun], model: ProjectionModel, settings: dict, families: bool = True,
              pairs: list[tuple[str, str]] | None = None, scale_only: set[str] | None = None) -> ProjectionModel:
    """`model` with factors fitted on `runs` (the search bounds from `settings`, data/projection.toml [fit]). With
    `families`: every device family with at least `min_family_runs` runs (default 2) also gets factors fitted on its
    runs alone, and its devices the latency scales of that fit; a family's factors cover the kinds of work its runs
    had, the others come from the fit on every run. With `[fit] scale_by = "run"`, each run gets a latency scale of
    its own and each device the one `pairs` (labels of runs of one workload on two devices) give it; runs named in
    `scale_only` then give their latency scale (for the pairs) without fitting the factors."""
    grid = {"grid_points": int(settings.get("grid_points", 40)),
            "efficiency_min": float(settings.get("efficiency_min", 0.05)),
            "efficiency_max": float(settings.get("efficiency_max", 1.5)),
            "relative": bool(settings.get("relative", False)),
            "device_scales": bool(settings.get("device_scales", True))}
    model = replace(model, fit={**model.fit, **settings})  # the model says how it was fitted (with_run_latency reads it)
    if settings.get("scale_by") == "run":
        fitted = _fit_with_pairs(runs, model, grid, pairs or [], bool(settings.get("roofs", False)), scale_only or set(),
                                 bool(settings.get("kind_latency", False)))
    else:
        fitted = with_fit(model, fit_factors(runs, **grid))
    if not families:
        return replace(fitted, families={})
    by_family: dict[str, list[FitRun]] = {}
    for run in runs:
        if run.family:
            by_family.setdefault(run.family, []).append(run)
    fitted_families, scales = {}, dict(fitted.device_latency)
    for family, members in sorted(by_family.items()):
        if len(members) < int(settings.get("min_family_runs", 2)):
            continue
        fit = fit_factors(members, **grid)
        fitted_families[family] = fit.factors
        scales.update(fit.device_latency)
    return replace(fitted, families=fitted_families, device_latency=scales)


def _fit_with_pairs(runs: list[FitRun], model: ProjectionModel, grid: dict, pairs: list[tuple[str, str]],
                    roofs: bool, scale_only: set[str], kinds: bool = False) -> ProjectionModel:
    """Factors with a latency scale per run, each device's scale from the pairs; the devices whose ceilings are
    datasheet values also get, from their pairs (projection_kinds), a per-kernel latency per kind of work (`kinds`)
    and the shares of their roofs they reach (`roofs`; the factors are then fitted again on the runs' devices as
    those shares make them)."""
    device_of = {r.label: r.key for r in runs}
    shares: dict[str, tuple[float, float]] = {}
    kind_latency: dict[str, dict[str, float]] = {}
    fitted = model
    for _ in range(2 if roofs else 1):
        scaled = [replace(r, target=with_roofs(r.target, shares[r.key])) if r.key in shares else r for r in runs]
        fit = fit_factors([r for r in scaled if r.label not in scale_only], **grid, scale_by="run")
        run_scales = fit.run_latency
        if scale_only:  # every run's scale with those factors: the pairs' ratios need both sides
            run_scales = _run_scales(scaled, fit.factors, bool(grid.get("relative")))
        fitted = replace(with_fit(model, Fit(fit.factors, scales_from_pairs(run_scales, device_of, pairs))),
                         device_roofs=dict(shares))
        if not (roofs or kinds):
            break
        datasheet = {r.key for r in runs if r.target.source.get("bandwidth") == "datasheet"}
        kind_latency, shares = fit_device_kinds(_pair_sides(runs, fitted, pairs), datasheet, kinds, roofs)
        if not roofs:
            break
    return replace(fitted, device_roofs=dict(shares), device_kind_latency=kind_latency)


def _pair_sides(runs: list[FitRun], model: ProjectionModel, pairs: list[tuple[str, str]]) -> list[Side]:
    """Both directions of every pair whose runs are here, as projection_kinds fits them."""
    by_label = {r.label: r for r in runs}
    out = []
    for a, b in pairs:
        if a not in by_label or b not in by_label:
            continue
        for own, other in ((by_label[a], by_label[b]), (by_label[b], by_label[a])):
            measured = {(p, g): v for p, g, v in measured_per_step(other.inputs).iter_rows() if g != ALL}
            own_target = own.target.changed(latency_scale=model.device_latency.get(own.key, 1.0), family=own.family)
            other_target = other.target.changed(latency_scale=model.device_latency.get(other.key, 1.0),
                                                family=other.family)
            out.append(side(own.inputs, own_target, other_target, model, own.l2_bytes, own.key, other.key, measured))
    return out


def _run_scales(runs: list[FitRun], factors: dict[str, GroupFactors], relative: bool) -> dict[str, float]:
    samples = _merged_samples(pl.concat([work_at_full_efficiency(r) for r in runs], how="vertical_relaxed"),
                              relative)
    labels = sorted(set(samples["run"]))
    return _device_scales(samples, factors, labels, "run")


def with_fit(model: ProjectionModel, fit: Fit) -> ProjectionModel:
    """The model with the fitted factors (kinds of work not in the fitting runs keep theirs) and the fitted
    devices' latency scales."""
    return replace(model, factors={**model.factors, **fit.factors}, device_latency=dict(fit.device_latency))


def fitted_target(run: FitRun, model: ProjectionModel) -> Target:
    """The run's device as the model sees it: its fitted latency scale, per-kind latency, family and roof shares."""
    target = run.target.changed(latency_scale=model.device_latency.get(run.key, 1.0), family=run.family,
                                kind_latency=dict(model.device_kind_latency.get(run.key, {})))
    return with_roofs(target, model.device_roofs[run.key]) if run.key in model.device_roofs else target


def calibration_table(runs: list[FitRun], model: ProjectionModel) -> pl.DataFrame:
    """Each run projected onto its own device (with its own per-kernel latency where the model is fitted so, as the
    study does): per phase, measured and projected time per step and the ratio."""
    parts = []
    for run in runs:
        target = with_run_latency(run.inputs, run.target, run.target, model)[0]
        table = phase_projection(project(run.inputs, target, model, Options(), run.l2_bytes))
        parts.append(table.with_columns(pl.lit(run.label).alias("run"), pl.lit(run.target.name).alias("device")))
    return pl.concat(parts, how="vertical_relaxed").select("run", "device", "phase", "steps", "measured_per_step_ns",
                                                            "projected_per_step_ns", "ratio", "carried_pct")


def run_latency_scale(inputs: pl.DataFrame, source: Target, model: ProjectionModel,
                      steps: dict[str, int] | None = None) -> float:
    """The per-kernel latency scale of one measured run on its own device: the one that best reproduces each phase's
    measured time with the model's factors (least squares over the phases' relative errors, each phase alike). A run
    carries its software's per-kernel latency (eager or compiled, library versions) to any target; the model's
    device scales (from pairs) say only how devices differ. 1 where no phase has a latency term."""
    projected = project(inputs, source.changed(latency_scale=1.0), model, Options(), source.l2_bytes, steps)
    modelled = pl.col("bound") != "carried"
    totals = projected.group_by("phase").agg(
        pl.col("dur_ns").cast(pl.Float64).sum().alias("y"),
        pl.col("projected_ns").filter(~modelled).sum().alias("carried"),
        pl.col("latency_ns").filter(modelled).sum().alias("lat"),
        pl.max_horizontal("memory_ns", "compute_ns").filter(modelled).sum().alias("work"))
    totals = totals.filter((pl.col("y") > 0) & (pl.col("lat") > 0))
    if totals.is_empty():
        return 1.0
    y, lat = totals["y"].to_numpy(), totals["lat"].to_numpy()
    rest = totals["work"].to_numpy() + totals["carried"].to_numpy()
    scale = float((lat * (y - rest) / y ** 2).sum() / (lat ** 2 / y ** 2).sum())
    return max(scale, 0.05)  # floored: a run whose kernels all beat their roofs still has some latency


def with_run_latency(inputs: pl.DataFrame, source: Target, target: Target, model: ProjectionModel,
                     steps: dict[str, int] | None = None) -> tuple[Target, Target]:
    """Source and target with the run's own per-kernel latency (run_latency_scale) where the model is fitted with a
    scale per run (`[fit] scale_by = "run"`): the target's is the run's times the target's device scale over the
    source's (a `--set latency` value counts as the target's device scale). Unchanged otherwise."""
    if model.fit.get("scale_by") != "run":
        return source, target
    scale = run_latency_scale(inputs, source, model, steps)
    same = target == source
    ratio = target.latency_scale / source.latency_scale if source.latency_scale else 1.0
    measured = source.changed(latency_scale=scale, source={**source.source, "latency": "fitted on this run"})
    if same:
        return measured, measured
    return measured, target.changed(latency_scale=scale * ratio,
                                    source={**target.source, "latency": "this run's, times the devices' ratio"})
