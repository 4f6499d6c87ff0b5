"""What the report's power-over-time figure draws (docs/energy.md): the board's power, the energy counter's mean
power between its updates, the stages of the energy pass and its prefill and decode windows, on one clock (seconds
from the first read). Decimated here, not in the drawing: power by time bins (mean, least and largest per bin), the
windows of a phase merged where they touch, so a figure of any run draws a few thousand points at most."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kernelscope.analyze.energy import counter_updates
from kernelscope.contracts.energy_tables import DECODE, PREFILL

MAX_BINS = 1000  # power bins (each a mean, a least and a largest value)
MAX_UPDATES = 1000  # counter intervals drawn; more are merged into as many of equal count
MAX_SPANS = 400  # window spans per phase; more are merged across their smallest gaps


@dataclass(frozen=True)
class PowerTimeline:
    """Times in seconds from the first read, powers in watts."""

    bin_s: np.ndarray  # each bin's middle
    mean_w: np.ndarray
    low_w: np.ndarray
    high_w: np.ndarray
    update_s: np.ndarray  # the counter's updates (edges of its intervals)
    update_w: np.ndarray  # mean power over each interval (one fewer than update_s)
    stages: list[tuple[str, float, float]] = field(default_factory=list)  # name, start, end
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # phase → (start, width)
    end_s: float = 0.0  # the last read (the first is at 0)
    points: int = 0  # power reads drawn from


def power_timeline(samples: pl.DataFrame, windows: pl.DataFrame,
                   stages: list[tuple[str, int, int]] | None = None) -> PowerTimeline | None:
    """None where fewer than two reads carry a finite, non-negative power over a positive span of time.
    stages: (name, start ns, end ns) on the samples' clock; taken from the windows where not given."""
    if not {"host_ns", "power_mw"} <= set(samples.columns):
        return None
    reads = (samples.select(pl.col("host_ns").cast(pl.Float64, strict=False),
                            pl.col("power_mw").cast(pl.Float64, strict=False))
             .filter(pl.col("host_ns").is_finite() & pl.col("power_mw").is_finite() & (pl.col("power_mw") >= 0))
             .sort("host_ns"))
    if reads.height < 2:
        return None
    t = reads["host_ns"].to_numpy()
    origin, span = t[0], t[-1] - t[0]
    if span <= 0:
        return None
    watts = reads["power_mw"].to_numpy() * 1e-3
    bins = min(MAX_BINS, reads.height)
    width = span / bins
    index = np.minimum(((t - origin) / width).astype(np.int64), bins - 1)
    count = np.bincount(index, minlength=bins)
    used = count > 0
    mean = np.bincount(index, weights=watts, minlength=bins)[used] / count[used]
    low, high = np.full(bins, np.inf), np.full(bins, -np.inf)
    np.minimum.at(low, index, watts)
    np.maximum.at(high, index, watts)
    middle = (np.arange(bins)[used] + 0.5) * width
    update_s, update_w = _counter_power(samples, origin)
    return PowerTimeline(bin_s=middle * 1e-9, mean_w=mean, low_w=low[used], high_w=high[used],
                         update_s=update_s, update_w=update_w,
                         stages=[(name, (a - origin) * 1e-9, (b - origin) * 1e-9)
                                 for name, a, b in (stages if stages is not None else _stages_of(windows))],
                         spans=_spans(windows, origin), end_s=span * 1e-9, points=reads.height)


def _counter_power(samples: pl.DataFrame, origin: float) -> tuple[np.ndarray, np.ndarray]:
    """The counter's updates and the mean power over each interval between them (merged into MAX_UPDATES
    intervals of equal count where there are more)."""
    if "energy_mj" not in samples.columns:
        return np.array([]), np.array([])
    clean = samples.select(pl.col("host_ns").cast(pl.Float64, strict=False),
                           pl.col("energy_mj").cast(pl.Float64, strict=False)).filter(
        pl.col("host_ns").is_finite() & pl.col("energy_mj").is_finite())
    t, e_mj = counter_updates(clean)
    if len(t) < 2:
        return np.array([]), np.array([])
    if len(t) - 1 > MAX_UPDATES:
        keep = np.unique(np.linspace(0, len(t) - 1, MAX_UPDATES + 1).round().astype(np.int64))
        t, e_mj = t[keep], e_mj[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        watts = np.diff(e_mj) * 1e-3 / (np.diff(t) * 1e-9)
    return (t - origin) * 1e-9, watts


def _stages_of(windows: pl.DataFrame) -> list[tuple[str, int, int]]:
    if windows.is_empty() or not {"stage", "start_ns", "end_ns"} <= set(windows.columns):
        return []
    rows = (windows.filter(pl.col("stage").is_not_null())
            .group_by("stage").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("start_ns"))
    return [(r["stage"], r["start_ns"], r["end_ns"]) for r in rows.iter_rows(named=True)]


def _spans(windows: pl.DataFrame, origin: float) -> dict[str, list[tuple[float, float]]]:
    """Per phase (prefill, decode), its windows as (start, width) in seconds, touching ones merged, then merged
    across the smallest gaps down to MAX_SPANS."""
    out: dict[str, list[tuple[float, float]]] = {}
    if windows.is_empty() or not {"phase", "start_ns", "end_ns"} <= set(windows.columns):
        return out
    for phase in (PREFILL, DECODE):
        rows = windows.filter(pl.col("phase") == phase).sort("start_ns")
        if rows.is_empty():
            continue
        start = (rows["start_ns"].to_numpy().astype(np.float64) - origin) * 1e-9
        end = np.maximum.accumulate((rows["end_ns"].to_numpy().astype(np.float64) - origin) * 1e-9)
        gaps = start[1:] - end[:-1]
        limit = np.sort(gaps)[len(gaps) - MAX_SPANS] if len(gaps) >= MAX_SPANS else 0.0
        cut = np.flatnonzero(gaps > max(limit, 0.0))
        first = np.concatenate(([0], cut + 1))
        last = np.concatenate((cut, [len(start) - 1]))
        out[phase] = [(float(start[a]), float(end[b] - start[a])) for a, b in zip(first, last, strict=True)]
    return out
