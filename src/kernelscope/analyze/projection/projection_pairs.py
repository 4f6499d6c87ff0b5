"""What runs of one workload on two devices tell the projection model about the devices themselves
(docs/whatif.md, "Calibration"): whatever the software or the workload does to a run, it does to both sides of a
pair, so the ratio of the two sides is the devices' ratio.

- Per-kernel latency: each run is fitted with a latency scale of its own; across a pair the ratio of the two scales
  is the devices' ratio (scales_from_pairs).
- Roofs: a device whose ceilings are datasheet values (no calibration of it measured here) gets the share of its
  bandwidth and of its compute peaks that its pairs show it reaches, relative to the other side's ceilings
  (roof_shares).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.projection.projection import (
    AlikeRows,
    ProjectionModel,
    Target,
    merge_alike,
    phase_times,
)
from kernelscope.analyze.projection.projection_model import Options

ROOF_GRID = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1)  # shares of a datasheet roof tried


@dataclass(frozen=True)
class PairSide:
    """One side of a pair as the roof fit needs it: its merged projection inputs, device, measured time per step
    per phase, and the L2 of its device."""

    label: str
    inputs: AlikeRows
    target: Target
    measured: dict[str, float]
    l2_bytes: float | None


def scales_from_pairs(run_scales: dict[str, float], run_device: dict[str, str],
                      pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Per device, a latency scale from runs fitted with a scale each: across a pair (one workload on two devices)
    the ratio of the two runs' scales is the devices' ratio, whatever the software or workload did to both; a
    least-squares solution over every pair, its level set by the runs' own scales (weakly). A device in no pair takes
    the geometric mean of its runs' scales."""
    paired = sorted({run_device[r] for pair in pairs for r in pair if r in run_device})
    index = {d: i for i, d in enumerate(paired)}
    rows, values = [], []
    for a, b in pairs:
        if a in run_scales and b in run_scales and run_device[a] != run_device[b]:
            row = np.zeros(len(paired))
            row[index[run_device[b]]], row[index[run_device[a]]] = 1.0, -1.0
            rows.append(row)
            values.append(np.log(run_scales[b] / run_scales[a]))
    level = 0.1  # the runs' own scales only set the level the pairs leave free
    for run, scale in run_scales.items():
        if run_device[run] in index:
            row = np.zeros(len(paired))
            row[index[run_device[run]]] = level
            rows.append(row)
            values.append(level * np.log(scale))
    out: dict[str, float] = {}
    if paired and rows:
        solution = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)[0]
        out = {d: float(np.exp(solution[i])) for d, i in index.items()}
    for device in set(run_device.values()) - set(out):
        logs = [np.log(v) for r, v in run_scales.items() if run_device[r] == device]
        out[device] = float(np.exp(np.mean(logs))) if logs else 1.0
    return {d: round(v, 4) for d, v in sorted(out.items())}


def pair_side(label: str, inputs, target: Target, l2_bytes: float | None) -> PairSide:
    """A run (projection_inputs) prepared for roof_shares."""
    alike = merge_alike(inputs)
    totals = alike.rows.group_by("phase").agg(pl.col("dur_ns").sum())
    measured = {phase: float(total) / alike.steps.get(phase, 1) for phase, total in totals.iter_rows()}
    return PairSide(label, alike, target, measured, l2_bytes)


def with_roofs(target: Target, shares: tuple[float, float]) -> Target:
    memory, compute = shares
    return target.changed(bandwidth=target.bandwidth * memory,
                          flops={k: v * compute for k, v in target.flops.items()})


def roof_shares(model: ProjectionModel, pairs: list[tuple[PairSide, PairSide]], fitted: set[str],
                key_of: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Per device named in `fitted` (those whose ceilings are datasheet values): the shares of its bandwidth and
    compute peaks that minimise the squared ln error of every pair it is in, each side projected onto the other
    (measured × model(other) ÷ model(self) against the other's measurement, per phase). key_of: a target's name →
    its device's key in the model."""
    out: dict[str, tuple[float, float]] = {}
    for device in sorted(fitted):
        names = {name for name, key in key_of.items() if key == device}
        mine = [(a, b) for a, b in pairs if names & {a.target.name, b.target.name}]
        if not mine:
            continue
        best: tuple[float, tuple[float, float]] | None = None
        for memory in ROOF_GRID:
            for compute in ROOF_GRID:
                shares = (memory, compute)
                error = sum(_pair_error(model, a, b, names, shares) for a, b in mine)
                if best is None or error < best[0]:
                    best = (error, shares)
        assert best is not None
        out[device] = best[1]
    return out


def _pair_error(model: ProjectionModel, a: PairSide, b: PairSide, names: set[str],
                shares: tuple[float, float]) -> float:
    def target(side: PairSide) -> Target:
        return with_roofs(side.target, shares) if side.target.name in names else side.target

    error = 0.0
    for source, other in ((a, b), (b, a)):
        on_source = phase_times(source.inputs, target(source), model, Options(), source.l2_bytes)
        on_other = phase_times(source.inputs, target(other), model, Options(), source.l2_bytes)
        for phase, measured in source.measured.items():
            if phase in other.measured and on_source.get(phase) and other.measured[phase] > 0:
                estimate = measured * on_other[phase] / on_source[phase]
                error += math.log(estimate / other.measured[phase]) ** 2
    return error
