"""Histograms of a phase's launches (duration, grid, registers, …) and of Nsight Compute's metrics, four panels a
row. Drawing only: the bins come from figure_inputs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib import ticker  # noqa: E402

from kernelscope.report.figure_base import (  # noqa: E402
    PALETTE,
    Version,
    literal,
    one_version,
    plain_log_ticks,
    save_versions,
)
from kernelscope.report.figure_inputs import (  # noqa: E402
    HistogramPanel,
    histogram_panels,
    measured_histogram_panels,
)


def histograms(kernels: pl.DataFrame, title: str, directory: Path, stem: str, words: dict[str, Any] | None = None,
               cpu_run: bool = False) -> list[Path]:
    """One panel per metric the data supports (launches of the phase; empty metrics are left out)."""
    return binned_histograms(histogram_panels(kernels, cpu_run), title, directory, stem, words, cpu_run)


def binned_histograms(panels: list[HistogramPanel], title: str, directory: Path, stem: str,
                      words: dict[str, Any] | None = None, cpu_run: bool = False) -> list[Path]:
    """histograms() from panels binned beforehand (figure_inputs.histogram_panels): what the report's helper
    processes are given."""
    return binned_histograms_versions(panels, one_version(title, directory, stem, words), cpu_run)[0]


def binned_histograms_versions(panels: list[HistogramPanel], versions: list[Version], cpu_run: bool = False
                               ) -> list[list[Path]]:
    return _histogram_grid(panels, versions, PALETTE[0], "calls" if cpu_run else "launches")


def _histogram_grid(panels: list[HistogramPanel], versions: list[Version], color: tuple,
                    count_key: str) -> list[list[Path]]:
    """Four histograms a row (fewer when there are fewer panels); a panel binned logarithmically gets a
    logarithmic axis."""
    if not panels:
        return [[] for _ in versions]
    cols = min(4, len(panels))
    rows_n = math.ceil(len(panels) / cols)
    width, height = max(2.9 * cols, 5.5), 2.5 * rows_n + 0.4
    # Tick sizes through rcParams: ticks are made when the figure is drawn, so this context spans the saving too
    # (tick_params on every axis restyled each tick it had already made).
    with plt.rc_context({"xtick.labelsize": 7, "ytick.labelsize": 7}):
        fig, axes = plt.subplots(rows_n, cols, figsize=(width, height), squeeze=False)
        _fixed_grid_margins(fig, width, height, rows_n, cols)
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax, panel in zip(axes.flat, panels, strict=False):
            if panel.log_x:
                ax.set_xscale("log")
            _bars(ax, panel.counts, panel.edges, color)
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(_short_count))  # 25k, 1.2M: fits the fixed margin
        plain_log_ticks(fig)

        def label(version: Version) -> None:
            w = version.words
            for ax, panel in zip(axes.flat, panels, strict=False):
                ax.set_xlabel(w[panel.key], fontsize=8)
                ax.set_ylabel(w[count_key], fontsize=8)
            fig.suptitle(literal(version.title))

        return save_versions(fig, versions, label)


def _bars(ax: plt.Axes, counts: np.ndarray, edges: np.ndarray, color: tuple) -> None:
    """A histogram as one filled outline with thin white lines between neighbouring bars: it looks like one bar
    per bin, but is two artists instead of thirty patches (each patch cost a share of every figure's time)."""
    ax.stairs(counts, edges, fill=True, color=color)
    ax.vlines(edges[1:-1], 0, np.minimum(counts[:-1], counts[1:]), colors="white", linewidth=0.4)


def _short_count(value: float, _position: object = None) -> str:
    """A count tick: 800, 25k, 1.2M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.4g}{suffix}"
    return f"{value:.4g}"


# Margins of a histogram grid, in inches: room for short count labels (25k) and an axis label on the left
# and below every panel, and for the title above. Fixed margins replace tight_layout, which measured every text of
# the figure with an extra draw: about 40% of a grid's time.
_GRID_LEFT, _GRID_RIGHT, _GRID_BOTTOM, _GRID_TOP = 0.62, 0.12, 0.48, 0.42


_GRID_COLUMN_GAP, _GRID_ROW_GAP = 0.62, 0.62


def _fixed_grid_margins(fig: plt.Figure, width: float, height: float, rows: int, cols: int) -> None:
    panel_width = (width - _GRID_LEFT - _GRID_RIGHT - (cols - 1) * _GRID_COLUMN_GAP) / cols
    panel_height = (height - _GRID_TOP - _GRID_BOTTOM - (rows - 1) * _GRID_ROW_GAP) / rows
    fig.subplots_adjust(left=_GRID_LEFT / width, right=1 - _GRID_RIGHT / width, bottom=_GRID_BOTTOM / height,
                        top=1 - _GRID_TOP / height, wspace=_GRID_COLUMN_GAP / panel_width,
                        hspace=_GRID_ROW_GAP / panel_height)


def measured_histograms(launches: pl.DataFrame, title: str, directory: Path, stem: str,
                        words: dict[str, Any] | None = None) -> list[Path]:
    """One panel per Nsight Compute metric, over the profiled launches."""
    return measured_histograms_versions(launches, one_version(title, directory, stem, words))[0]


def measured_histograms_versions(launches: pl.DataFrame, versions: list[Version]) -> list[list[Path]]:
    return _histogram_grid(measured_histogram_panels(launches), versions, PALETTE[1], "launches")
