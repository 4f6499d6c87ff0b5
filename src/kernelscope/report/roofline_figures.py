"""Roofline charts: kernels placed by arithmetic intensity against the device's roofs (physical, normalised to
the roofs, per kernel), and Nsight Compute's measured points. Drawing only: the numbers come from
analyze/costs/roofline; points are per kernel name within a phase (totals of FLOPs, bytes and time)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from kernelscope.analyze.hardware import Ceilings  # noqa: E402
from kernelscope.report.figure_base import (  # noqa: E402
    PALETTE,
    Version,
    group_colors,
    legend_beside,
    literal,
    one_version,
    place_labels,
    plain_log_ticks,
    point_sizes,
    save_versions,
    short_label,
    term,
)


def _above_roof(rows: pl.DataFrame) -> pl.Series:
    """Kernels whose analytic rates pass a roof (over 100% of it)."""
    if "compute_roof_pct" not in rows.columns or "memory_roof_pct" not in rows.columns:
        return pl.Series([False] * rows.height, dtype=pl.Boolean)
    share = [rows[c].cast(pl.Float64).fill_null(0.0) for c in ("compute_roof_pct", "memory_roof_pct")]
    return ((share[0] > 100) | (share[1] > 100)).cast(pl.Boolean)


def roofline_physical(points: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                      label_top: int = 8, words: dict[str, Any] | None = None) -> list[Path]:
    """Achieved FLOP/s against arithmetic intensity, with the memory roof and the compute roofs of the
    precisions present. Kernels that do no arithmetic have no place on the intensity axis: they are drawn on a
    band of their own at the left, by their share of the bandwidth roof. Points above a roof are ringed."""
    return roofline_physical_versions(points, ceilings, one_version(title, directory, stem, words), label_top)[0]


def roofline_physical_versions(points: pl.DataFrame, ceilings: Ceilings, versions: list[Version],
                               label_top: int = 8) -> list[list[Path]]:
    drawn = points.filter(pl.col("flops") > 0)
    no_flops = points.filter(pl.col("flops") <= 0)
    band = band_word = None
    if no_flops.height:
        fig, (band, ax) = plt.subplots(1, 2, figsize=(10.0, 5.0), gridspec_kw={"width_ratios": [1, 8], "wspace": 0.3})
        band_word = _no_flops_band(band, no_flops, ceilings)
    else:
        fig, ax = plt.subplots(figsize=(9.6, 5.0))
    band_below = bool(no_flops.height) and bool(
        ((no_flops["bytes_per_s"].fill_null(0) / ceilings.bandwidth * 100) < BAND_FLOOR).any())
    x_lo = max(min(drawn["intensity"].min() or 1e-2, 1e-2) / 2, 1e-4) if drawn.height else 1e-2
    precisions = [p for p in dict.fromkeys(drawn["precision"].to_list()) if ceilings.peak(p)]
    x_hi = max([(drawn["intensity"].max() or 1.0) if drawn.height else 1.0]
               + [ceilings.ridge(p) or 1 for p in precisions]) * 8
    xs = np.logspace(math.log10(x_lo), math.log10(x_hi), 200)
    roofs, ridges = [], []
    for i, precision in enumerate(precisions):
        peak = ceilings.peak(precision)
        (line,) = ax.plot(xs, np.minimum(peak, xs * ceilings.bandwidth), color="0.25", lw=1.2,
                          ls=["-", "--", ":", "-."][i % 4])
        roofs.append((line, precision, peak))
        ridge = ceilings.ridge(precision)
        ax.axvline(ridge, color="0.6", lw=0.8, ls=":")
        ridges.append((ax.annotate("", (ridge, peak), textcoords="offset points", xytext=(3, -12), fontsize=7,
                                   color="0.35"), ridge))
    groups = _group_points(ax, drawn, "intensity", "flops_per_s")
    above = drawn.filter(_above_roof(drawn))
    ringed = (ax.scatter(above["intensity"], above["flops_per_s"], s=160, facecolors="none", edgecolors="#d62728",
                         linewidths=1.2) if above.height else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="major", color="0.9")
    caption = fig.text(0.01, 0.01, "", fontsize=7, color="0.3")
    fig.subplots_adjust(left=0.07, right=LEGEND_RIGHT, top=0.92, bottom=0.14)
    plain_log_ticks(fig)
    named = [(r["intensity"], r["flops_per_s"], short_label(r["label"])) for r in drawn.head(label_top).iter_rows(named=True)]
    placed: list[Any] = []

    def label(version: Version) -> None:
        w = version.words
        _label_roofs(roofs, w, ceilings)
        for annotation, ridge in ridges:
            annotation.set_text(w["ridge"].format(value=f"{ridge:.0f}"))
        _label_groups(groups, w, ringed)
        if band is not None:
            _label_no_flops_band(band, band_word, w)
        ax.set_xlabel(w["intensity"])
        ax.set_ylabel(w["achieved"])
        legend_beside(ax)
        fig.suptitle(literal(version.title), fontsize=10)
        caption.set_text(w["caption"].format(bandwidth=f"{ceilings.bandwidth / 1e12:.2f}",
                                             source=term(w, ceilings.source.get("bandwidth", "?")))
                         + (f"; ▽ {w['below_floor']}" if band_below else ""))
        # Where the kernels' names fit depends on the legend, whose size depends on the words: placed anew.
        for text in placed:
            text.remove()
        placed[:] = place_labels(ax, named)

    return save_versions(fig, versions, label)


def _group_points(ax: plt.Axes, rows: pl.DataFrame, x: str, y: str) -> list[tuple[Any, str]]:
    """One scatter per kernel group (colours by group name, the same in every language); the groups' artists."""
    out = []
    for group, color in group_colors(rows["group"].to_list()).items():
        g = rows.filter(pl.col("group") == group)
        out.append((ax.scatter(g[x], g[y], s=point_sizes(g["dur_ns"].to_numpy()), color=color, alpha=0.75,
                               edgecolors="black", linewidths=0.4), group))
    return out


def _label_roofs(roofs: list[tuple[Any, str, float]], w: dict[str, Any], ceilings: Ceilings) -> None:
    """Each compute roof's legend entry: its precision, peak and where the peak comes from."""
    for line, precision, peak in roofs:
        line.set_label(w["roof"].format(precision=precision, peak=f"{peak / 1e12:,.0f}",
                                        source=term(w, ceilings.source.get(precision, "?"))))


def _label_groups(groups: list[tuple[Any, str]], w: dict[str, Any], ringed: Any) -> None:
    for artist, group in groups:
        artist.set_label(term(w, group))
    if ringed is not None:
        ringed.set_label(w["above_roof"])


def _no_flops_band(band: plt.Axes, rows: pl.DataFrame, ceilings: Ceilings) -> Text:
    """Kernels without FLOPs (copies, casts, memsets) on a band of their own: no intensity is made up for
    them; their height is their share of the bandwidth roof (bytes/s over the memory bandwidth). Returns the text
    that names the band under its one tick (a text, not a tick label: tick labels stay numbers, drawn once for
    every language, figure_versions)."""
    share = (rows["bytes_per_s"].fill_null(0) / ceilings.bandwidth * 100).to_numpy()
    band.scatter(np.full(share.size, 0.5), np.maximum(share, BAND_FLOOR), s=point_sizes(rows["dur_ns"].to_numpy()),
                 color="0.55", alpha=0.7, edgecolors="black", linewidths=0.4)
    _below_floor(band, [0.5] * int((share < BAND_FLOOR).sum()), BAND_FLOOR)
    band.set_yscale("log")
    band.set_xlim(0, 1)
    band.set_xticks([0.5], [""])
    band.grid(True, axis="y", color="0.9")
    below = plt.rcParams["xtick.major.size"] + plt.rcParams["xtick.major.pad"]  # where a tick label would be
    return band.annotate("", (0.5, 0), xycoords="axes fraction", xytext=(0, -below), textcoords="offset points",
                         ha="center", va="top", fontsize=plt.rcParams["xtick.labelsize"])


# The lowest value each chart plots; a point below it is drawn at it and marked with a downward triangle.
NORMALIZED_FLOOR = 1e-6  # share of peak


BAND_FLOOR = 1e-4  # % of the bandwidth roof


PANEL_FLOOR = 1e-4  # of the roof at the kernel's intensity


LEGEND_RIGHT = 0.74  # the charts' right edge, leaving the legend its column


def _below_floor(ax: plt.Axes, xs: list[float], floor: float) -> Any:
    """Points whose value is below the plotted floor, marked where they are drawn (at the floor): an open
    downward triangle over each. None when there are none."""
    if not xs:
        return None
    return ax.scatter(xs, [floor] * len(xs), s=70, marker="v", facecolors="none", edgecolors="#1f3a93",
                      linewidths=1.1, zorder=4)


def _label_no_flops_band(band: plt.Axes, word: Text, w: dict[str, Any]) -> None:
    word.set_text(w["no_flops_band"])
    band.set_ylabel(w["no_flops_axis"] + " (%)")


def roofline_normalized(points: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                        words: dict[str, Any] | None = None) -> list[Path]:
    """Intensity over the ridge point against the share of peak reached: every precision on one chart, with
    the roof at min(1, x). Kernels without FLOPs are on a band of their own at the left, by their share of the
    bandwidth roof."""
    return roofline_normalized_versions(points, ceilings, one_version(title, directory, stem, words))[0]


def roofline_normalized_versions(points: pl.DataFrame, ceilings: Ceilings, versions: list[Version]
                                 ) -> list[list[Path]]:
    rows, no_flops = [], []
    for row in points.iter_rows(named=True):
        ridge, peak = ceilings.ridge(row["precision"] or "fp32"), ceilings.peak(row["precision"] or "fp32")
        if not ridge or not peak:
            continue
        if row["flops"] > 0:
            rows.append((row["intensity"] / ridge, row["flops_per_s"] / peak, row))
        else:
            no_flops.append(row)
    band = band_word = None
    if no_flops:
        fig, (band, ax) = plt.subplots(1, 2, figsize=(10.0, 5.0), gridspec_kw={"width_ratios": [1, 8], "wspace": 0.3})
        band_word = _no_flops_band(band, pl.DataFrame(no_flops, infer_schema_length=None), ceilings)
    else:
        fig, ax = plt.subplots(figsize=(9.6, 5.0))
    x_lo = min([r[0] for r in rows] + [1e-3]) / 3
    xs = np.logspace(math.log10(x_lo), 2, 200)
    (roof,) = ax.plot(xs, np.minimum(1.0, xs), color="0.25", lw=1.4)
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    groups = []
    for group, color in group_colors([r[2]["group"] for r in rows]).items():
        sel = [r for r in rows if r[2]["group"] == group]
        groups.append((ax.scatter([r[0] for r in sel], [max(r[1], NORMALIZED_FLOOR) for r in sel],
                                  s=point_sizes(np.array([r[2]["dur_ns"] for r in sel], dtype=float)), color=color,
                                  alpha=0.75, edgecolors="black", linewidths=0.4), group))
    above = [r for r in rows if r[1] > min(1.0, r[0]) * 1.0001]
    ringed = (ax.scatter([r[0] for r in above], [r[1] for r in above], s=160, facecolors="none",
                         edgecolors="#d62728", linewidths=1.2) if above else None)
    below = _below_floor(ax, [r[0] for r in rows if r[1] < NORMALIZED_FLOOR], NORMALIZED_FLOOR)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="major", color="0.9")
    fig.subplots_adjust(left=0.08, right=LEGEND_RIGHT, top=0.92, bottom=0.1)

    def label(version: Version) -> None:
        w = version.words
        roof.set_label(w["normalized_roof"])
        _label_groups(groups, w, ringed)
        if below is not None:
            below.set_label(w["below_floor"])
        if band is not None:
            _label_no_flops_band(band, band_word, w)
        ax.set_xlabel(w["normalized_x"])
        ax.set_ylabel(w["normalized_y"])
        fig.suptitle(literal(version.title), fontsize=10)
        legend_beside(ax)

    return save_versions(fig, versions, label)


def per_kernel_rooflines(points: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                         top: int = 8, words: dict[str, Any] | None = None) -> list[Path]:
    """Small multiples: each top kernel on its own roof (its precision), with its share of that roof. A kernel
    without FLOPs has no intensity: its panel shows its share of the bandwidth roof as a bar instead."""
    return per_kernel_rooflines_versions(points, ceilings, one_version(title, directory, stem, words), top)[0]


def per_kernel_rooflines_versions(points: pl.DataFrame, ceilings: Ceilings, versions: list[Version], top: int = 8
                                  ) -> list[list[Path]]:
    chosen = points.head(top)
    cols = 4
    rows_n = max(1, math.ceil(chosen.height / cols))
    notes: list[tuple[Any, str, dict[str, str]]] = []  # each panel's note: its text, the words' key, the values
    with plt.rc_context({"xtick.labelsize": 6.5, "ytick.labelsize": 6.5}):  # ticks are made when saved
        fig, axes = plt.subplots(rows_n, cols, figsize=(11, 2.6 * rows_n), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        for ax, row in zip(axes.flat, chosen.iter_rows(named=True), strict=False):
            ax.set_visible(True)
            # The title at the top of its panel and no axis labels: fixed positions, where matplotlib would measure
            # every tick label of the panel again at each save to place them (a fifth of this figure's time).
            ax.set_title(short_label(row["label"], 44), fontsize=7, y=1.0)
            ax.xaxis.set_label_coords(0.5, 0.0)
            ax.yaxis.set_label_coords(0.0, 0.5)
            precision = row["precision"] or "fp32"
            if row["flops"] <= 0:
                share = 100 * (row["bytes_per_s"] or 0) / ceilings.bandwidth
                ax.barh([0], [share], color=PALETTE[0], height=0.5)
                ax.axvline(100, color="0.25", lw=1)
                ax.set_xlim(0, max(110, share * 1.1))
                ax.set_yticks([])
                notes.append((ax.text(0.03, 0.85, "", transform=ax.transAxes, fontsize=7), "bandwidth_only",
                              {"pct": f"{share:.0f}"}))
                continue
            peak = ceilings.peak(precision) or ceilings.peak("fp32") or 1.0
            ridge = peak / ceilings.bandwidth
            x_point = row["intensity"]
            xs = np.logspace(math.log10(min(x_point, ridge) / 20), math.log10(max(x_point, ridge) * 20), 100)
            ax.plot(xs, np.minimum(peak, xs * ceilings.bandwidth), color="0.25", lw=1)
            y_point = row["flops_per_s"]
            roof = min(peak, x_point * ceilings.bandwidth)
            above = y_point > roof * 1.0001
            ax.scatter([x_point], [max(y_point, roof * PANEL_FLOOR)], s=30, color="#d62728" if above else PALETTE[0],
                       zorder=3)
            if y_point < roof * PANEL_FLOOR:
                _below_floor(ax, [x_point], roof * PANEL_FLOOR)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.minorticks_off()  # minor log ticks cost seconds per panel and add nothing here
            notes.append((ax.text(0.03, 0.92, "", transform=ax.transAxes, fontsize=7,
                                  color="#d62728" if above else "black"), "of_roof",
                          {"pct": f"{100 * y_point / roof:.0f}", "precision": precision}))
        fig.subplots_adjust(hspace=0.6, wspace=0.3, top=0.88, left=0.08, right=0.98, bottom=0.1)
        axis_titles = (fig.text(0.53, 0.01, "", ha="center", fontsize=8),
                       fig.text(0.005, 0.5, "", va="center", rotation="vertical", fontsize=8))

        def label(version: Version) -> None:
            for text, key, values in notes:
                text.set_text(version.words[key].format(**values))
            fig.suptitle(literal(version.title))
            # One axis title for every panel (each shares the roofline's axes): intensity across, FLOP/s up.
            axis_titles[0].set_text(version.words["panel_x"])
            axis_titles[1].set_text(version.words["panel_y"])

        return save_versions(fig, versions, label)


def measured_roofline(by_kernel: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                      words: dict[str, Any] | None = None) -> list[Path]:
    """Measured points (FLOPs and DRAM bytes counted by Nsight Compute, over the measured duration) against the
    memory roof and the BF16 and FP32 roofs."""
    return measured_roofline_versions(by_kernel, ceilings, one_version(title, directory, stem, words))[0]


def measured_roofline_versions(by_kernel: pl.DataFrame, ceilings: Ceilings, versions: list[Version]
                               ) -> list[list[Path]]:
    points = by_kernel.filter(
        (pl.col("flops") > 0) & (pl.col("dram_bytes") > 0) & (pl.col("duration_us") > 0)
    ).with_columns((pl.col("flops") / (pl.col("duration_us") / 1e6)).alias("flops_per_s"))
    if points.height == 0:
        return [[] for _ in versions]
    fig, ax = plt.subplots(figsize=(9.6, 5.0))
    x_lo = max(points["measured_intensity"].min() / 4, 1e-3)
    x_hi = max(points["measured_intensity"].max(), ceilings.ridge("bf16") or 1) * 8
    xs = np.logspace(math.log10(x_lo), math.log10(x_hi), 200)
    roofs = []
    for i, precision in enumerate(p for p in ("bf16", "fp32") if ceilings.peak(p)):
        peak = ceilings.peak(precision)
        (line,) = ax.plot(xs, np.minimum(peak, xs * ceilings.bandwidth), color="0.25", lw=1.2, ls=["-", "--"][i])
        roofs.append((line, precision, peak))
    classes = []
    for cls, color in group_colors(points["measured_class"].to_list()).items():
        g = points.filter(pl.col("measured_class") == cls)
        classes.append((ax.scatter(g["measured_intensity"], g["flops_per_s"], s=40, color=color, edgecolors="black",
                                   linewidths=0.4, alpha=0.8), cls))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="major", color="0.9")
    caption = fig.text(0.01, 0.01, "", fontsize=6.5, color="0.3", wrap=True)
    fig.subplots_adjust(left=0.08, right=LEGEND_RIGHT, top=0.93, bottom=0.14)
    plain_log_ticks(fig)
    named = [(r["measured_intensity"], r["flops_per_s"], short_label(r["label"])) for r in points.head(6).iter_rows(named=True)]
    placed: list[Any] = []

    def label(version: Version) -> None:
        w = version.words
        _label_roofs(roofs, w, ceilings)
        _label_groups(classes, w, None)
        ax.set_xlabel(w["measured_intensity"])
        ax.set_ylabel(w["measured_flops"])
        ax.set_title(literal(version.title))
        legend_beside(ax)
        caption.set_text(w["measured_caption"].format(bandwidth=f"{ceilings.bandwidth / 1e12:.2f}",
                                                      source=term(w, ceilings.source.get("bandwidth", "?"))))
        for text in placed:  # placed anew: where the names fit depends on the legend, whose size on the words
            text.remove()
        placed[:] = place_labels(ax, named)

    return save_versions(fig, versions, label)
