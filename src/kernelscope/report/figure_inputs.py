"""What the figures read besides their data: the words of each language and the kernel columns the histograms
show. Kept apart from figures.py so that the process that plans a report's figures (and hands them to helper
processes) never loads matplotlib."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from kernelscope.report.templating import message_catalog

# (kernel column, scale to the axis' unit, logarithmic bins when the values span more than 20×)
HISTOGRAMS = [
    ("dur_ns", 1e-3, True),
    ("compute_roof_pct", 1.0, False),
    ("memory_roof_pct", 1.0, False),
    ("arithmetic_intensity", 1.0, True),
    ("est_occupancy_pct", 1.0, False),
    ("registers_per_thread", 1.0, False),
    ("blocks", 1.0, True),
    ("threads_per_block", 1.0, False),
]
_LAUNCH_SHAPE = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]

# Nsight Compute's histograms: (measured column, words' key of its axis label, logarithmic bins may do)
MEASURED_HISTOGRAMS = [
    ("duration_us", "measured_duration", True), ("sm_throughput_pct", "sm_throughput_pct", False),
    ("dram_throughput_pct", "dram_throughput_pct", False), ("mem_throughput_pct", "mem_throughput_pct", False),
    ("l1tex_throughput_pct", "l1tex_throughput_pct", False), ("l2_throughput_pct", "l2_throughput_pct", False),
    ("l1_hit_rate_pct", "l1_hit_rate_pct", False), ("l2_hit_rate_pct", "l2_hit_rate_pct", False),
    ("achieved_occupancy_pct", "achieved_occupancy_pct", False),
    ("theoretical_occupancy_pct", "theoretical_occupancy_pct", False),
    ("mem_busy_pct", "mem_busy_pct", False), ("dram_bytes", "dram_bytes", True),
]
BINS = 30


@dataclass(frozen=True)
class HistogramPanel:
    """One panel of a histogram grid, binned: what a helper process needs to draw it (a big run's launches would
    be a hundred megabytes to send; their bins are a few hundred bytes)."""

    counts: np.ndarray
    edges: np.ndarray
    key: str  # the words' key of its axis label
    log_x: bool  # logarithmic bins and axis


def binned(values: np.ndarray, key: str, log: bool) -> HistogramPanel:
    """BINS bins over the values; logarithmic where `log` allows it and the values span more than 20×."""
    low, high = values.min(), values.max()
    if log and low > 0 and high / low > 20:
        edges = np.logspace(math.log10(low), math.log10(high), BINS)
        # 10 ** log10(x) can miss x in the last bit: the outer edges are the values themselves, or the smallest or
        # largest launch would fall outside every bin (one launch of a real run's 3,085 was left out).
        edges[0], edges[-1] = low, high
        counts, edges = np.histogram(values, bins=edges)
        return HistogramPanel(counts, edges, key, True)
    counts, edges = np.histogram(values, bins=BINS)
    return HistogramPanel(counts, edges, key, False)


def _finite(series: pl.Series, scale: float, log: bool) -> np.ndarray:
    # Each step copies only where it changes something (a column of every launch is tens of MB on a big run).
    values = series.drop_nulls().cast(pl.Float64).to_numpy()
    if scale != 1.0:
        values = values * scale
    finite = np.isfinite(values)
    if not finite.all():
        values = values[finite]
    if log and not (values > 0).all():
        values = values[values > 0]
    return values


def histogram_panels(kernels: pl.DataFrame, cpu_run: bool = False) -> list[HistogramPanel]:
    """One panel per metric the launches have values of (HISTOGRAMS), binned."""
    k = kernels.with_columns(
        (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("blocks"),
        (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("threads_per_block"),
    )
    panels = []
    for column, scale, log in HISTOGRAMS:
        if column not in k.columns:
            continue
        values = _finite(k[column], scale, log)
        if values.size:
            key = "duration_cpu" if cpu_run and column == "dur_ns" else "duration" if column == "dur_ns" else column
            if column == "dur_ns" and values.max() > MS_FROM_US:  # times above 10 ms read in ms
                values, key = values / 1e3, key + "_ms"
            panels.append(binned(values, key, log))
    return panels


MS_FROM_US = 10_000.0  # a duration axis whose longest value passes 10 ms (in µs) is drawn in ms


def measured_histogram_panels(launches: pl.DataFrame) -> list[HistogramPanel]:
    """One panel per Nsight Compute metric measured (MEASURED_HISTOGRAMS), binned."""
    panels = []
    for column, key, log in MEASURED_HISTOGRAMS:
        if column in launches.columns:
            values = _finite(launches[column], 1.0, log)
            if values.size:
                if column == "duration_us" and values.max() > MS_FROM_US:
                    values, key = values / 1e3, key + "_ms"
                panels.append(binned(values, key, log))
    return panels


def words_for(lang: str = "en") -> dict[str, Any]:
    """The words figures draw in `lang` (messages/<lang>.toml [figures]), with the report's terms under "terms"."""
    catalog = message_catalog("", lang)
    return {**catalog["figures"], "terms": catalog["terms"]}


def histogram_columns() -> list[str]:
    """The kernel columns the histograms read (only these travel to a helper process)."""
    return [column for column, *_ in HISTOGRAMS] + _LAUNCH_SHAPE + ["instances", "phase"]
