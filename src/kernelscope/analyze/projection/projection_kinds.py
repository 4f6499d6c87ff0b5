"""What pairs of runs tell the projection model about a device whose ceilings are datasheet values (docs/whatif.md,
"Calibration"): per kind of work, its per-kernel latency relative to the factors' (another vendor's attention
library, its launch path for small copies), and the shares of its datasheet bandwidth and compute peaks that it
reaches. Each is chosen to minimise the squared ln error of the study's estimate (projection_estimate: kernel by
kernel, measured × model(other) ÷ model(self)) of every pair the device is in, both ways, per phase and kind of work
against the other side's measurement. Searched on grids, a kind at a time, then the roofs, a few rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.projection.projection import ProjectionModel, Target, merge_alike, project
from kernelscope.analyze.projection.projection_model import Options

KIND_GRID = tuple(float(v) for v in np.geomspace(0.25, 4.0, 17))  # per-kind latency multipliers tried
ROOF_GRID = tuple(float(v) for v in np.geomspace(0.4, 1.2, 11))  # shares of a datasheet roof tried
ROUNDS = 3


@dataclass(frozen=True)
class Side:
    """One direction of a pair: a run's merged rows with the model's terms on its own device (a) and on the other
    side's device (b), at latency scale 1, and the other side's measured time per step per (phase, kind)."""

    source: str  # device keys
    other: str
    group: np.ndarray
    phase: np.ndarray
    dur: np.ndarray
    modelled: np.ndarray
    per_step: np.ndarray  # 1 ÷ the row's phase's steps
    latency_a: np.ndarray
    memory_a: np.ndarray
    compute_a: np.ndarray
    latency_b: np.ndarray
    memory_b: np.ndarray
    compute_b: np.ndarray
    scale_ratio: float  # the other device's latency scale ÷ this one's
    measured: dict[tuple[str, str], float]  # (phase, kind) → the other side's time per step


def side(inputs: pl.DataFrame, own: Target, other: Target, model: ProjectionModel, l2_bytes: float | None,
         source: str, other_key: str, measured: dict[tuple[str, str], float]) -> Side:
    """A Side of `inputs` (projection_inputs) measured on `own`, against `other` (datasheet ceilings unscaled)."""
    alike = merge_alike(inputs)

    def terms(target: Target) -> pl.DataFrame:
        unit = target.changed(latency_scale=1.0, kind_latency={})
        return project(alike.rows, unit, model, Options(), l2_bytes, alike.steps)

    a, b = terms(own), terms(other)
    steps = a["phase"].replace_strict(alike.steps, default=1, return_dtype=pl.Float64).to_numpy()
    return Side(source, other_key, a["group"].to_numpy(), a["phase"].to_numpy(), a["dur_ns"].cast(pl.Float64).to_numpy(),
                (a["bound"] != "carried").to_numpy(), 1.0 / steps,
                a["latency_ns"].to_numpy(), a["memory_ns"].to_numpy(), a["compute_ns"].to_numpy(),
                b["latency_ns"].to_numpy(), b["memory_ns"].to_numpy(), b["compute_ns"].to_numpy(),
                other.latency_scale / own.latency_scale if own.latency_scale else 1.0, measured)


Kinds = dict[str, dict[str, float]]  # device → kind → latency multiplier
Roofs = dict[str, tuple[float, float]]  # device → (memory share, compute share)


def _terms(s: Side, latency: np.ndarray, memory: np.ndarray, compute: np.ndarray, device: str, kinds: Kinds,
           roofs: Roofs) -> tuple[np.ndarray, np.ndarray]:
    table = kinds.get(device) or {}
    multiplier = np.array([table.get(g, 1.0) for g in s.group]) if table else 1.0
    m, c = roofs.get(device, (1.0, 1.0))
    return latency * multiplier, np.maximum(memory / m, compute / c)


def estimates(s: Side, kinds: Kinds, roofs: Roofs) -> np.ndarray:
    """Per row, the estimate on the other device (per step): measured × model(other) ÷ model(own), each with the
    run's own latency scale (projection_fit.run_latency_scale, fitted here on the model with these multipliers)."""
    latency_a, work_a = _terms(s, s.latency_a, s.memory_a, s.compute_a, s.source, kinds, roofs)
    latency_b, work_b = _terms(s, s.latency_b, s.memory_b, s.compute_b, s.other, kinds, roofs)
    numerator = denominator = 0.0
    for phase in np.unique(s.phase):
        rows = s.phase == phase
        y = float(s.dur[rows].sum())
        lat = float((latency_a * s.modelled)[rows].sum())
        rest = float((work_a * s.modelled)[rows].sum() + (s.dur * ~s.modelled)[rows].sum())
        if y > 0 and lat > 0:
            numerator += lat * (y - rest) / y ** 2
            denominator += lat ** 2 / y ** 2
    scale = max(numerator / denominator, 0.05) if denominator else 1.0
    on_a = np.where(s.modelled, scale * latency_a + work_a, s.dur)
    on_b = np.where(s.modelled, scale * s.scale_ratio * latency_b + work_b, s.dur)
    ratio = np.divide(on_b, on_a, out=np.ones_like(on_a), where=on_a > 0)
    return s.dur * ratio * s.per_step


def log_errors(s: Side, kinds: Kinds, roofs: Roofs, kind: str | None = None) -> list[float]:
    """ln(estimate ÷ measured) per (phase, kind of work) the other side measured (only `kind`, where given)."""
    estimate = estimates(s, kinds, roofs)
    out = []
    for (phase, group), measured in s.measured.items():
        if kind is not None and group != kind:
            continue
        rows = (s.phase == phase) & (s.group == group)
        total = float(estimate[rows].sum())
        if rows.any() and total > 0 and measured > 0:
            out.append(math.log(total / measured))
    return out


def _cost(sides: list[Side], kinds: Kinds, roofs: Roofs, kind: str | None = None) -> float | None:
    errors = [e for s in sides for e in log_errors(s, kinds, roofs, kind)]
    return sum(e * e for e in errors) if errors else None


def fit_device_kinds(sides: list[Side], devices: set[str], fit_kinds: bool = True,
                     fit_roofs: bool = True) -> tuple[Kinds, Roofs]:
    """Per device in `devices`: its per-kind latency multipliers and roof shares, from the sides it is in."""
    kinds: Kinds = {d: {} for d in devices}
    roofs: Roofs = {d: (1.0, 1.0) for d in devices}
    for _ in range(ROUNDS):
        for device in sorted(devices):
            mine = [s for s in sides if device in (s.source, s.other)]
            if not mine:
                continue
            for kind in sorted({str(g) for s in mine for g in set(s.group)}) if fit_kinds else ():
                best = None
                for value in KIND_GRID:
                    cost = _cost(mine, {**kinds, device: {**kinds[device], kind: value}}, roofs, kind)
                    if cost is not None and (best is None or cost < best[0] - 1e-12):
                        best = (cost, value)
                if best is not None:
                    kinds[device][kind] = best[1]
            if fit_roofs:
                best = None
                for memory in ROOF_GRID:
                    for compute in ROOF_GRID:
                        cost = _cost(mine, kinds, {**roofs, device: (memory, compute)})
                        if cost is not None and (best is None or cost < best[0] - 1e-12):
                            best = (cost, (memory, compute))
                if best is not None:
                    roofs[device] = best[1]
    rounded_kinds = {d: {k: round(v, 4) for k, v in sorted(t.items()) if v != 1.0} for d, t in kinds.items()}
    return ({d: t for d, t in rounded_kinds.items() if t},
            {d: (round(m, 4), round(c, 4)) for d, (m, c) in roofs.items() if (m, c) != (1.0, 1.0)})
