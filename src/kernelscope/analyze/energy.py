"""Energy of prefill and decode from `profile --energy`'s samples (docs/energy.md).

The board's cumulative energy counter updates far more slowly than it can be read (every ~100 ms on an H200 under
driver 580; the reads in between repeat the last value), so:
- per token (measured): each stage's mean power over the counter's updates that fall inside it (whole update
  intervals only), times the stage's length, over its generations. Prefill: the stage of one-token generations
  (setup and prefill alone), per prompt token. Decode: a full generation's energy less a one-token generation's, per
  new token after the first;
- per window (estimated where a window is shorter than an update interval): the counter interpolated linearly
  between its updates at the window's edges, so a short prefill shares its update interval's mean power with the
  decode steps around it. These give the phase table of the full generations and tile its stage exactly;
- the checks: prefill's and decode's joules per token times the full generations' tokens against the counter's
  change read around them (the per-token values are stage means over whole updates, the total is read at the
  stage's edges); and the power samples (NVML's instantaneous board power, another quantity, updated about as
  often as the counter) integrated over the full generations.

Tables (docs/run-format.md): samples as power.parquet holds them (host_ns, energy_mj, energy_at_ns, power_mw,
power_at_ns), windows as energy.parquet holds them (stage, repeat, generation, phase, step, start_ns, end_ns,
tokens).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope.contracts.energy_tables import (
    DECODE,
    GENERATION,
    PREFILL,
    PREFILL_ONLY,
    SETUP,
    StageBounds,
)
from kernelscope.contracts.trace_records import EnergyInfo, EnergyPhase, EnergyStage

METHOD = ("NVML total energy counter sampled on a thread; per token: mean power over the counter's whole update "
          "intervals inside each stage (one-token generations for prefill, full generations less them for decode); "
          "per window: the counter interpolated between its updates")
BETWEEN = "between"  # time inside the full generations' stage but outside every generation's windows
PHASE_ORDER = (PREFILL, DECODE, SETUP)


def counter_updates(samples: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(host ns, mJ) of each update of the counter: the first sample that shows a new value (NVML stamps a field
    with the time it was read, not the time the counter moved)."""
    rows = samples.filter(pl.col("energy_mj").is_not_null()).sort("host_ns")
    t = rows["host_ns"].to_numpy().astype(np.float64)
    e = rows["energy_mj"].to_numpy().astype(np.float64)
    if len(e) < 2:
        return t, e
    changed = np.concatenate(([True], np.diff(e) != 0))
    return t[changed], e[changed]


def _power_points(samples: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    rows = samples.filter(pl.col("power_mw").is_not_null()).sort("host_ns")
    return rows["host_ns"].to_numpy().astype(np.float64), rows["power_mw"].to_numpy().astype(np.float64)


def _power_integral(t: np.ndarray, p_mw: np.ndarray, at: np.ndarray) -> np.ndarray:
    """∫ power dt in joules from the first point to each time in `at` (power held from one sample to the next, as
    the board reports an average that holds until its next update)."""
    if len(t) == 0:
        return np.full(len(at), np.nan)
    cumulative = np.concatenate(([0.0], np.cumsum(p_mw[:-1] * np.diff(t)))) * 1e-12
    k = np.clip(np.searchsorted(t, at, side="right") - 1, 0, len(t) - 1)
    return cumulative[k] + p_mw[k] * (at - t[k]) * 1e-12


def window_energy(samples: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The windows with `joules` (the counter interpolated between its updates) and `joules_from_power` (the power
    samples integrated; null without any)."""
    t, e_mj = counter_updates(samples)
    start = windows["start_ns"].to_numpy().astype(np.float64)
    end = windows["end_ns"].to_numpy().astype(np.float64)
    joules = (np.interp(end, t, e_mj) - np.interp(start, t, e_mj)) * 1e-3
    pt, p_mw = _power_points(samples)
    from_power = _power_integral(pt, p_mw, end) - _power_integral(pt, p_mw, start) if len(pt) else None
    return windows.with_columns(pl.Series("joules", joules),
                                pl.Series("joules_from_power", from_power, dtype=pl.Float64))


def _stage_power(t: np.ndarray, e_mj: np.ndarray, stage: StageBounds) -> tuple[float, int]:
    """Mean watts over the counter's updates inside the stage (first to last), and how many update intervals that
    spans; interpolated over the whole stage where fewer than two updates fall inside it."""
    inside = (t >= stage.started_ns) & (t <= stage.ended_ns)
    if inside.sum() >= 2:
        ts, es = t[inside], e_mj[inside]
        return float((es[-1] - es[0]) * 1e-3 / ((ts[-1] - ts[0]) * 1e-9)), int(inside.sum() - 1)
    edges = np.interp([stage.started_ns, stage.ended_ns], t, e_mj)
    return float((edges[1] - edges[0]) * 1e-3 / ((stage.ended_ns - stage.started_ns) * 1e-9)), 0


def _stage(t: np.ndarray, e_mj: np.ndarray, bounds: StageBounds, windows: pl.DataFrame) -> EnergyStage:
    """A stage's mean power, and a generation's energy: that power over the median generation's length (from its
    first window's start to its last's end; the median keeps a slow first generation out)."""
    watts, intervals = _stage_power(t, e_mj, bounds)
    mine = windows.filter(pl.col("stage") == bounds.name)
    lengths = mine.group_by("repeat", "generation").agg(pl.col("end_ns").max() - pl.col("start_ns").min())
    median_ns = float(lengths["end_ns"].median()) if lengths.height else None
    return EnergyStage(stage=bounds.name, started_ns=bounds.started_ns, ended_ns=bounds.ended_ns,
                       seconds=(bounds.ended_ns - bounds.started_ns) * 1e-9,
                       generations=bounds.generations, update_intervals=intervals, mean_watts=watts,
                       generation_ms=median_ns * 1e-6 if median_ns is not None else None,
                       joules_per_generation=watts * median_ns * 1e-9 if median_ns is not None else None,
                       prompt_tokens=int(mine.filter(pl.col("phase") == PREFILL)["tokens"].sum()),
                       new_tokens=int(mine.filter(pl.col("phase") == DECODE)["tokens"].sum()))


def energy_info(samples: pl.DataFrame, windows: pl.DataFrame, stages: list[StageBounds], repeats: int,
                generations: int, interval_s: float) -> tuple[EnergyInfo, pl.DataFrame]:
    """run.json's `energy` and the windows with their joules."""
    t, e_mj = counter_updates(samples)
    if len(t) < 2:
        raise ValueError("the energy counter never changed: nothing to measure (callers check counter_updates)")
    measured = window_energy(samples, windows)
    by_name = {s.name: s for s in stages}
    records = [_stage(t, e_mj, s, windows) for s in stages]
    full = by_name[GENERATION]
    bounds = np.array([full.started_ns, full.ended_ns], dtype=np.float64)
    counter = float(np.diff(np.interp(bounds, t, e_mj))[0]) * 1e-3
    pt, p_mw = _power_points(samples)
    power = float(np.diff(_power_integral(pt, p_mw, bounds))[0]) if len(pt) else None
    in_full = measured.filter(pl.col("stage") == GENERATION)
    phases = [row for row in (_phase(in_full, name) for name in PHASE_ORDER) if row is not None]
    seconds = (full.ended_ns - full.started_ns) * 1e-9
    between_s = seconds - sum(p.seconds for p in phases)
    between = counter - sum(p.joules for p in phases)
    between_power = power - sum(p.joules_from_power or 0.0 for p in phases) if power is not None else None
    phases.append(EnergyPhase(phase=BETWEEN, seconds=between_s, windows=0, tokens=0, joules=between,
                              joules_from_power=between_power,
                              mean_watts=between / between_s if between_s > 0 else None))
    updates = np.diff(t) * 1e-6
    spacing = np.diff(np.sort(samples["host_ns"].to_numpy())) * 1e-6
    prefill_j, decode_j = _per_token(records)
    full_record = next(r for r in records if r.stage == GENERATION)
    rebuilt = (prefill_j * full_record.prompt_tokens + decode_j * full_record.new_tokens
               if prefill_j is not None and decode_j is not None else None)
    info = EnergyInfo(
        method=METHOD, repeats=repeats, generations=generations, samples=samples.height,
        sample_interval_ms=float(np.median(spacing)) if len(spacing) else interval_s * 1e3,
        counter_update_ms=float(np.median(updates)) if len(updates) else None,
        pass_seconds=seconds, decode_step_ms=_median_ms(in_full.filter(pl.col("phase") == DECODE)),
        counter_joules=counter, power_joules=power,
        agreement=power / counter if power is not None and counter > 0 else None, phases=phases, stages=records,
        prefill_joules_per_token=prefill_j, decode_joules_per_token=decode_j,
        per_token_joules=rebuilt, per_token_check=rebuilt / counter if rebuilt is not None and counter > 0 else None,
    )
    return info, measured


def _per_token(stages: list[EnergyStage]) -> tuple[float | None, float | None]:
    """Prefill: a one-token generation's joules per prompt token. Decode: a full generation's joules less a
    one-token generation's, per new token after the first (both stages ran the same prompts); none where a stage
    spans fewer than two whole updates of the counter, or the difference is not positive."""
    by_name = {s.stage: s for s in stages}
    alone, full = by_name.get(PREFILL_ONLY), by_name.get(GENERATION)
    if (alone is None or not alone.generations or not alone.prompt_tokens or alone.joules_per_generation is None
            or alone.update_intervals < 2):
        return None, None
    prefill = alone.joules_per_generation / (alone.prompt_tokens / alone.generations)
    if (full is None or not full.generations or not full.new_tokens or full.joules_per_generation is None
            or full.update_intervals < 2):
        return prefill, None
    extra = full.joules_per_generation - alone.joules_per_generation
    return prefill, extra / (full.new_tokens / full.generations) if extra > 0 else None


def _median_ms(rows: pl.DataFrame) -> float | None:
    return float((rows["end_ns"] - rows["start_ns"]).median()) * 1e-6 if rows.height else None


def _phase(measured: pl.DataFrame, name: str) -> EnergyPhase | None:
    rows = measured.filter(pl.col("phase") == name)
    if rows.is_empty():
        return None
    seconds = float((rows["end_ns"] - rows["start_ns"]).sum()) * 1e-9
    joules = float(rows["joules"].sum())
    tokens = int(rows["tokens"].sum())
    power = rows["joules_from_power"]
    return EnergyPhase(
        phase=name, seconds=seconds, windows=rows.height, tokens=tokens, joules=joules,
        joules_from_power=float(power.sum()) if power.null_count() == 0 else None,
        joules_per_token=joules / tokens if tokens else None,
        mean_watts=joules / seconds if seconds > 0 else None,
        mean_window_ms=seconds / rows.height * 1e3,
    )
