"""Energy of each phase from `profile --energy`'s samples: the board's cumulative energy counter interpolated
between its updates at every window's edges, and the power samples integrated over the same windows; the two
instruments checked against each other over the whole pass.

Tables (docs/run-format.md): samples as power.parquet holds them (host_ns, energy_mj, energy_at_ns, power_mw,
power_at_ns), windows as energy.parquet holds them (repeat, generation, phase, step, start_ns, end_ns, tokens).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope.contracts.trace_records import EnergyInfo, EnergyPhase

METHOD = ("NVML total energy counter sampled on a thread, interpolated linearly between its updates at each "
          "window's edges; windows from device events at every forward pass")
BETWEEN = "between"  # time inside the pass but outside every generation's windows
PHASE_ORDER = ("prefill", "decode", "setup", BETWEEN)


def _series(samples: pl.DataFrame, value: str, stamp: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of one field: at the driver's own timestamp where it gave one, else the sample's; one point
    per distinct time, in time order."""
    rows = samples.filter(pl.col(value).is_not_null()).select(
        pl.coalesce(pl.col(stamp), pl.col("host_ns")).alias("t"), pl.col(value).cast(pl.Float64).alias("v"))
    rows = rows.unique("t", keep="first", maintain_order=True).sort("t")
    return rows["t"].to_numpy().astype(np.float64), rows["v"].to_numpy()


def _counter_points(samples: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The counter's update moments: where the driver stamps its values, each stamp; else the first sample that
    showed a new value (reads between updates repeat the last one)."""
    t, e = _series(samples, "energy_mj", "energy_at_ns")
    if len(e) > 1 and samples["energy_at_ns"].null_count() == samples.height:
        changed = np.concatenate(([True], np.diff(e) != 0))
        t, e = t[changed], e[changed]
    return t, e


def _power_integral(t: np.ndarray, p_mw: np.ndarray, at: np.ndarray) -> np.ndarray:
    """∫ power dt in joules from the first point to each time in `at` (power linear between points, held flat
    beyond them)."""
    if len(t) == 0:
        return np.full(len(at), np.nan)
    if len(t) == 1:
        return p_mw[0] * 1e-3 * (at - t[0]) * 1e-9
    cumulative = np.concatenate(([0.0], np.cumsum((p_mw[1:] + p_mw[:-1]) / 2 * np.diff(t)))) * 1e-12
    k = np.clip(np.searchsorted(t, at, side="right") - 1, 0, len(t) - 2)
    inside = np.clip(at, t[0], t[-1])
    p_at = p_mw[k] + (p_mw[k + 1] - p_mw[k]) * (inside - t[k]) / np.diff(t)[k]
    partial = (inside - t[k]) * (p_mw[k] + p_at) / 2 * 1e-12
    before = np.minimum(at - t[0], 0) * p_mw[0] * 1e-12
    after = np.maximum(at - t[-1], 0) * p_mw[-1] * 1e-12
    return cumulative[k] + partial + before + after


def window_energy(samples: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The windows with `joules` (counter) and `joules_from_power` (power samples; null without any)."""
    t, e_mj = _counter_points(samples)
    start, end = windows["start_ns"].to_numpy().astype(np.float64), windows["end_ns"].to_numpy().astype(np.float64)
    joules = (np.interp(end, t, e_mj) - np.interp(start, t, e_mj)) * 1e-3
    pt, p_mw = _series(samples, "power_mw", "power_at_ns")
    from_power = _power_integral(pt, p_mw, end) - _power_integral(pt, p_mw, start) if len(pt) else None
    return windows.with_columns(pl.Series("joules", joules),
                                pl.Series("joules_from_power", from_power, dtype=pl.Float64))


def energy_info(samples: pl.DataFrame, windows: pl.DataFrame, started_ns: int, ended_ns: int, repeats: int,
                generations: int, interval_s: float) -> tuple[EnergyInfo, pl.DataFrame]:
    """run.json's `energy` and the windows with their joules. The pass runs from started_ns to ended_ns; what lies
    inside it and outside every window is the `between` phase."""
    measured = window_energy(samples, windows)
    t, e_mj = _counter_points(samples)
    bounds = np.array([started_ns, ended_ns], dtype=np.float64)
    counter = float(np.diff(np.interp(bounds, t, e_mj))[0]) * 1e-3
    pt, p_mw = _series(samples, "power_mw", "power_at_ns")
    power = float(np.diff(_power_integral(pt, p_mw, bounds))[0]) if len(pt) else None
    phases = [row for row in (_phase(measured, name) for name in PHASE_ORDER[:-1]) if row is not None]
    seconds = (ended_ns - started_ns) * 1e-9
    in_windows = sum(p.seconds for p in phases)
    between_power = power - sum(p.joules_from_power or 0.0 for p in phases) if power is not None else None
    between = counter - sum(p.joules for p in phases)
    phases.append(EnergyPhase(phase=BETWEEN, seconds=seconds - in_windows, windows=0, tokens=0, joules=between,
                              joules_from_power=between_power,
                              mean_watts=between / (seconds - in_windows) if seconds > in_windows else None))
    updates = np.diff(t) * 1e-6
    decode = measured.filter(pl.col("phase") == "decode")
    step_ms = float((decode["end_ns"] - decode["start_ns"]).median()) * 1e-6 if decode.height else None
    info = EnergyInfo(
        method=METHOD, repeats=repeats, generations=generations, samples=samples.height,
        sample_interval_ms=interval_s * 1e3,
        counter_update_ms=float(np.median(updates)) if len(updates) else None,
        pass_seconds=seconds, decode_step_ms=step_ms, counter_joules=counter, power_joules=power,
        agreement=power / counter if power is not None and counter > 0 else None, phases=phases,
    )
    return info, measured


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
    )
