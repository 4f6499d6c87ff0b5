"""Roofline charts and histograms (matplotlib, written as PNG, and SVG on request). Drawing only: the numbers come from
analyze.roofline; points are per kernel name within a phase (totals of FLOPs, bytes and time)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib import font_manager, ticker  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from kernelscope.analyze.hardware import Ceilings  # noqa: E402
from kernelscope.report import figure_formats, figure_versions  # noqa: E402
from kernelscope.report.figure_inputs import (  # noqa: E402
    HistogramPanel,
    histogram_panels,
    measured_histogram_panels,
    words_for,
)

plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 7.5,
                     "svg.fonttype": "none", "figure.dpi": 100})
PALETTE = plt.get_cmap("tab10").colors


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(value: float, _position: object = None) -> str:
    """A decade tick as plain text (10³, 10⁻²): matplotlib's default lays each one out through mathtext, which
    was a third of the time of every figure."""
    if value <= 0:
        return ""
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) > 1e-9:
        return ""
    return "10" + str(round(exponent)).translate(_SUPERSCRIPT)


def _plain_log_ticks(fig: plt.Figure) -> None:
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(ticker.FuncFormatter(_power_of_ten))
                # Unlabelled minor ticks at 2…9 of each decade: drawn, but no longer located and formatted
                # by the default machinery (a second of every report).
                axis.set_minor_locator(ticker.NullLocator())
                axis.set_minor_formatter(ticker.NullFormatter())


def _save(fig: plt.Figure, directory: Path, stem: str, fitted: bool = False) -> list[Path]:
    """The figure in each format asked for (figure_formats; the first, PNG, is the one the report links), then
    closed. A figure not `fitted` by its maker (fixed margins) is laid out once here; bbox_inches="tight" would
    draw it twice per file."""
    paths = _write(fig, directory, stem, fitted)
    plt.close(fig)
    return paths


def _write(fig: plt.Figure, directory: Path, stem: str, fitted: bool = False) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    _plain_log_ticks(fig)
    if not fitted:
        fig.tight_layout()
    paths = figure_formats.figure_files(directory, stem)
    for path in paths:
        extra = {"pil_kwargs": dict(figure_versions.PNG_OPTIONS)} if path.suffix == ".png" else {}
        fig.savefig(path, dpi=figure_versions.PNG_DPI, **extra)
    return paths


@dataclass(frozen=True)
class Version:
    """One language's version of a figure: its title and words, the font its text is drawn in (None:
    matplotlib's own) and the files it goes to (directory/stem.png, …)."""

    title: str
    directory: Path
    stem: str
    words: dict[str, Any]
    font: str | None = None


def _one_version(title: str, directory: Path, stem: str, words: dict[str, Any] | None) -> list[Version]:
    return [Version(title, directory, stem, words or words_for())]


def _save_versions(fig: plt.Figure, versions: list[Version], label: Callable[[Version], None]) -> list[list[Path]]:
    """The figure saved once per version: `label` writes the version's words into it before each save. Shapes,
    axes and ticks are made once for all languages (they were about a fourth of the time of each figure). The
    figure is built, and its first version labelled, in the caller's font settings; for each later version every
    text switches to that version's font (its font first, DejaVu Sans, matplotlib's own, for the glyphs it lacks;
    the first version's fonts where it names none). Fitted figures only: a layout that depended on the words
    would differ between languages."""
    first_families = list(plt.rcParams["font.family"])
    first = versions[0]

    @contextmanager
    def words_of(version: Version) -> Iterator[None]:
        families = [version.font, "DejaVu Sans"] if version.font else first_families
        with plt.rc_context({"font.family": families} if version is not first else {}):
            if version is not first:
                for text in fig.findobj(Text):
                    text.set_fontfamily(families)
            yield

    def labelled(version: Version) -> None:
        with words_of(version):
            label(version)

    try:
        if len(versions) > 1 and figure_formats.chosen.get() == ("png",):
            # The shared part drawn once (figure_versions); each version's words drawn over it in its fonts.
            _plain_log_ticks(fig)
            return figure_versions.save_png_versions(
                fig, versions, labelled, lambda version: figure_formats.figure_files(version.directory, version.stem))
        out = []
        for index, version in enumerate(versions):
            with words_of(version):
                label(version)
                last = index == len(versions) - 1  # the last save closes the figure
                out.append((_save if last else _write)(fig, version.directory, version.stem, fitted=True))
    except BaseException:
        plt.close(fig)
        raise
    return out


def _colors(groups: list[str]) -> dict[str, tuple]:
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(sorted(set(groups)))}


def _sizes(dur: np.ndarray) -> np.ndarray:
    return 15 + 400 * dur / max(dur.max(), 1)


def cjk_font(families: list[str]) -> str | None:
    """The first of `families` installed here (matplotlib's font list), or None."""
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((family for family in families if family in installed), None)


def _term(words: dict[str, Any], value: str) -> str:
    return literal(words["terms"].get(value, value))


def _overlaps(box: Any, boxes: list[Any]) -> bool:
    return any(box.overlaps(other) for other in boxes)


def place_labels(ax: plt.Axes, points: list[tuple[float, float, str]], fontsize: float = 6.5) -> list[Any]:
    """Labels next to their points, none overlapping another label, the legend or a text already in the axes (the
    ridge points' values), or leaving the axes: each label tries offsets around its point, nearest first, and is
    left out when none is free (its point stays drawn). Returns the labels placed."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    taken: list[Any] = [legend.get_window_extent(renderer)] if legend is not None else []
    taken += [text.get_window_extent(renderer) for text in ax.texts if text.get_visible() and text.get_text()]
    placed = []
    offsets = [(6, 4), (6, -10), (-6, 4), (-6, -10), (6, 14), (6, -20), (-6, 14), (-6, -20), (14, -3), (-14, -3),
               (6, 24), (6, -30), (-6, 24), (-6, -30), (10, 36), (10, -44), (-10, 36), (-10, -44)]
    for x, y, text in points:
        for dx, dy in offsets:
            # A leader line from every label to its point: which point a name belongs to is never a guess.
            label = ax.annotate(text, (x, y), fontsize=fontsize, textcoords="offset points", xytext=(dx, dy),
                                ha="left" if dx > 0 else "right", va="bottom", zorder=5,
                                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75},
                                arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5, "shrinkA": 0,
                                            "shrinkB": 2})
            box = label.get_window_extent(renderer).expanded(1.04, 1.1)
            inside = (box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1)
            if inside and not _overlaps(box, taken):
                taken.append(box)
                placed.append(label)
                break
            label.remove()
    return placed


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
    return roofline_physical_versions(points, ceilings, _one_version(title, directory, stem, words), label_top)[0]


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
    _plain_log_ticks(fig)
    named = [(r["intensity"], r["flops_per_s"], _short(r["label"])) for r in drawn.head(label_top).iter_rows(named=True)]
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
        _legend(ax)
        fig.suptitle(literal(version.title), fontsize=10)
        caption.set_text(w["caption"].format(bandwidth=f"{ceilings.bandwidth / 1e12:.2f}",
                                             source=_term(w, ceilings.source.get("bandwidth", "?")))
                         + (f"; ▽ {w['below_floor']}" if band_below else ""))
        # Where the kernels' names fit depends on the legend, whose size depends on the words: placed anew.
        for text in placed:
            text.remove()
        placed[:] = place_labels(ax, named)

    return _save_versions(fig, versions, label)


def _group_points(ax: plt.Axes, rows: pl.DataFrame, x: str, y: str) -> list[tuple[Any, str]]:
    """One scatter per kernel group (colours by group name, the same in every language); the groups' artists."""
    out = []
    for group, color in _colors(rows["group"].to_list()).items():
        g = rows.filter(pl.col("group") == group)
        out.append((ax.scatter(g[x], g[y], s=_sizes(g["dur_ns"].to_numpy()), color=color, alpha=0.75,
                               edgecolors="black", linewidths=0.4), group))
    return out


def _label_roofs(roofs: list[tuple[Any, str, float]], w: dict[str, Any], ceilings: Ceilings) -> None:
    """Each compute roof's legend entry: its precision, peak and where the peak comes from."""
    for line, precision, peak in roofs:
        line.set_label(w["roof"].format(precision=precision, peak=f"{peak / 1e12:,.0f}",
                                        source=_term(w, ceilings.source.get(precision, "?"))))


def _label_groups(groups: list[tuple[Any, str]], w: dict[str, Any], ringed: Any) -> None:
    for artist, group in groups:
        artist.set_label(_term(w, group))
    if ringed is not None:
        ringed.set_label(w["above_roof"])


def _no_flops_band(band: plt.Axes, rows: pl.DataFrame, ceilings: Ceilings) -> Text:
    """Kernels without FLOPs (copies, casts, memsets) on a band of their own: no intensity is made up for
    them; their height is their share of the bandwidth roof (bytes/s over the memory bandwidth). Returns the text
    that names the band under its one tick (a text, not a tick label: tick labels stay numbers, drawn once for
    every language, figure_versions)."""
    share = (rows["bytes_per_s"].fill_null(0) / ceilings.bandwidth * 100).to_numpy()
    band.scatter(np.full(share.size, 0.5), np.maximum(share, BAND_FLOOR), s=_sizes(rows["dur_ns"].to_numpy()),
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
    return roofline_normalized_versions(points, ceilings, _one_version(title, directory, stem, words))[0]


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
    for group, color in _colors([r[2]["group"] for r in rows]).items():
        sel = [r for r in rows if r[2]["group"] == group]
        groups.append((ax.scatter([r[0] for r in sel], [max(r[1], NORMALIZED_FLOOR) for r in sel],
                                  s=_sizes(np.array([r[2]["dur_ns"] for r in sel], dtype=float)), color=color,
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
        _legend(ax)

    return _save_versions(fig, versions, label)


def per_kernel_rooflines(points: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                         top: int = 8, words: dict[str, Any] | None = None) -> list[Path]:
    """Small multiples: each top kernel on its own roof (its precision), with its share of that roof. A kernel
    without FLOPs has no intensity: its panel shows its share of the bandwidth roof as a bar instead."""
    return per_kernel_rooflines_versions(points, ceilings, _one_version(title, directory, stem, words), top)[0]


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
            ax.set_title(_short(row["label"], 44), fontsize=7, y=1.0)
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

        return _save_versions(fig, versions, label)


def histograms(kernels: pl.DataFrame, title: str, directory: Path, stem: str, words: dict[str, Any] | None = None,
               cpu_run: bool = False) -> list[Path]:
    """One panel per metric the data supports (launches of the phase; empty metrics are left out)."""
    return binned_histograms(histogram_panels(kernels, cpu_run), title, directory, stem, words, cpu_run)


def binned_histograms(panels: list[HistogramPanel], title: str, directory: Path, stem: str,
                      words: dict[str, Any] | None = None, cpu_run: bool = False) -> list[Path]:
    """histograms() from panels binned beforehand (figure_inputs.histogram_panels): what the report's helper
    processes are given."""
    return binned_histograms_versions(panels, _one_version(title, directory, stem, words), cpu_run)[0]


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
        _plain_log_ticks(fig)

        def label(version: Version) -> None:
            w = version.words
            for ax, panel in zip(axes.flat, panels, strict=False):
                ax.set_xlabel(w[panel.key], fontsize=8)
                ax.set_ylabel(w[count_key], fontsize=8)
            fig.suptitle(literal(version.title))

        return _save_versions(fig, versions, label)


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


def _legend(ax: plt.Axes) -> None:
    """The legend beside the axes, on the right: never over a point, a kernel's name or a ridge's value."""
    handles, labels = ax.get_legend_handles_labels()
    legend = ax.legend(handles, [_wrapped(label, 30) for label in labels], loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, framealpha=0.9, fontsize=7)
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([30])  # marker size in the legend, not the largest point's


def _wrapped(text: str, width: int) -> str:
    """Text on lines of about `width` characters (half as many of a wide script, such as Chinese)."""
    wide = sum(ord(c) > 0x2E80 for c in text) > len(text) / 3
    return "\n".join(textwrap.wrap(text, width // 2 if wide else width, break_long_words=True,
                                    break_on_hyphens=False) or [text])


def literal(text: str) -> str:
    """An input string drawn as written: matplotlib reads text between two `$` as mathtext (`a_$x$` would lose
    its dollars and set x in italics); an escaped dollar is drawn as a dollar."""
    return str(text).replace("$", r"\$")


def _short(name: str, limit: int = 28) -> str:
    """A kernel's name as a label: whole, wrapped onto lines of about `limit` characters (never cut short).
    Raw C++ signatures lose their parameter list; catalog names keep their details in parentheses."""
    text = name.removeprefix("void ")
    if "::" in text or "<" in text:
        text = text.split("(")[0]
    return literal(_wrapped(text, limit))


def measured_histograms(launches: pl.DataFrame, title: str, directory: Path, stem: str,
                        words: dict[str, Any] | None = None) -> list[Path]:
    """One panel per Nsight Compute metric, over the profiled launches."""
    return measured_histograms_versions(launches, _one_version(title, directory, stem, words))[0]


def measured_histograms_versions(launches: pl.DataFrame, versions: list[Version]) -> list[list[Path]]:
    return _histogram_grid(measured_histogram_panels(launches), versions, PALETTE[1], "launches")


def measured_roofline(by_kernel: pl.DataFrame, ceilings: Ceilings, title: str, directory: Path, stem: str,
                      words: dict[str, Any] | None = None) -> list[Path]:
    """Measured points (FLOPs and DRAM bytes counted by Nsight Compute, over the measured duration) against the
    memory roof and the BF16 and FP32 roofs."""
    return measured_roofline_versions(by_kernel, ceilings, _one_version(title, directory, stem, words))[0]


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
    for cls, color in _colors(points["measured_class"].to_list()).items():
        g = points.filter(pl.col("measured_class") == cls)
        classes.append((ax.scatter(g["measured_intensity"], g["flops_per_s"], s=40, color=color, edgecolors="black",
                                   linewidths=0.4, alpha=0.8), cls))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="major", color="0.9")
    caption = fig.text(0.01, 0.01, "", fontsize=6.5, color="0.3", wrap=True)
    fig.subplots_adjust(left=0.08, right=LEGEND_RIGHT, top=0.93, bottom=0.14)
    _plain_log_ticks(fig)
    named = [(r["measured_intensity"], r["flops_per_s"], _short(r["label"])) for r in points.head(6).iter_rows(named=True)]
    placed: list[Any] = []

    def label(version: Version) -> None:
        w = version.words
        _label_roofs(roofs, w, ceilings)
        _label_groups(classes, w, None)
        ax.set_xlabel(w["measured_intensity"])
        ax.set_ylabel(w["measured_flops"])
        ax.set_title(literal(version.title))
        _legend(ax)
        caption.set_text(w["measured_caption"].format(bandwidth=f"{ceilings.bandwidth / 1e12:.2f}",
                                                      source=_term(w, ceilings.source.get("bandwidth", "?"))))
        for text in placed:  # placed anew: where the names fit depends on the legend, whose size on the words
            text.remove()
        placed[:] = place_labels(ax, named)

    return _save_versions(fig, versions, label)


def compare_bars(mix: pl.DataFrame, labels: list[str], column: str, title: str, directory: Path, stem: str,
                 top: int = 8) -> list[Path]:
    """One horizontal bar per run, its device time per step stacked by `column` (category or library): the
    `top` largest values over all runs, the rest as 'other'. Columns per run: per_step_ns[<label>]."""
    per_run = [f"per_step_ns[{label}]" for label in labels]
    if mix.height == 0 or not all(c in mix.columns for c in per_run):
        return []
    filled = mix.with_columns(pl.col(c).fill_null(0.0) for c in per_run)
    order = filled.with_columns(pl.max_horizontal(per_run).alias("_max")).sort(["_max", column],
                                                                             descending=[True, False])
    keep = order[column].head(top).to_list()
    rest = order.filter(~pl.col(column).is_in(keep))
    groups = keep + (["other (rest)"] if rest.height else [])
    values = {g: [float(filled.filter(pl.col(column) == g)[c].sum()) for c in per_run] for g in keep}
    if rest.height:
        values["other (rest)"] = [float(rest[c].sum()) for c in per_run]
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.55 * len(labels)))
    left = np.zeros(len(labels))
    scale, unit = time_unit(max((sum(v[i] for v in values.values()) for i in range(len(labels))), default=0.0))
    for i, group in enumerate(groups):
        widths = np.array(values[group]) / scale
        ax.barh(range(len(labels)), widths, left=left, color=PALETTE[i % len(PALETTE)], label=literal(group), height=0.6)
        left += widths
    for y, total in enumerate(left):
        ax.annotate(f"{total:,.1f} {unit}", (total, y), textcoords="offset points", xytext=(4, -3), fontsize=7.5)
    ax.set_yticks(range(len(labels)), [literal(label) for label in labels])
    ax.invert_yaxis()
    ax.set_xlabel(f"device time per step ({unit})")
    ax.set_xlim(0, max(left.max(), 1e-9) * 1.18)
    ax.set_title(literal(title))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 3 else -0.2), ncol=3, frameon=False)
    return _save(fig, directory, stem)


def time_unit(largest_ns: float) -> tuple[float, str]:
    """The unit an axis of times reads in: ms once its largest value passes 10 ms, else µs (divisor from ns)."""
    return (1e6, "ms") if largest_ns > 1e7 else (1e3, "µs")


SWEEP_AXES = {"bandwidth": ("DRAM bandwidth (TB/s)", 1e12), "sram_bytes": ("on-chip memory (MB)", 1e6),
              "l2_bytes": ("L2 (MB)", 1e6), "onchip_bandwidth": ("on-chip bandwidth (TB/s)", 1e12),
              "latency_scale": ("per-kernel latency scale", 1.0)}


def sweep_chart(points: pl.DataFrame, parameter: str, phase: str, title: str, directory: Path, stem: str,
                mark: float | None = None) -> list[Path]:
    """Projected time per step against one quantity, stacked by kind of work; `mark` draws the target's value."""
    rows = points.filter((pl.col("parameter") == parameter) & (pl.col("phase") == phase))
    if rows.height == 0:
        return []
    label, unit = SWEEP_AXES.get(parameter, (f"{parameter} peak (TFLOP/s)", 1e12))
    values = sorted(set(rows["value"].to_list()))
    groups = (rows.group_by("group").agg(pl.col("projected_per_step_ns").sum())
              .sort(["projected_per_step_ns", "group"], descending=[True, False])["group"].to_list())
    stack = []
    for group in groups:
        by_value = dict(rows.filter(pl.col("group") == group).select("value", "projected_per_step_ns").iter_rows())
        stack.append([by_value.get(v, 0.0) for v in values])
    time_scale, time_word = time_unit(float(np.sum(np.array(stack), axis=0).max()) if stack else 0.0)
    stack = [[value / time_scale for value in row] for row in stack]
    xs = [v / unit for v in values]
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    ax.stackplot(xs, stack, labels=[literal(g) for g in groups], colors=[PALETTE[i % len(PALETTE)] for i in range(len(groups))], alpha=0.85)
    totals = np.sum(np.array(stack), axis=0)
    ax.plot(xs, totals, color="0.15", lw=1.2, marker="o", ms=3)
    if mark is not None:
        ax.axvline(mark / unit, color="0.3", ls="--", lw=0.9)
        ax.annotate("target", (mark / unit, totals.max()), textcoords="offset points", xytext=(4, -10), fontsize=7.5)
    ax.set_xlabel(label)
    ax.set_ylabel(f"projected {phase} time per step ({time_word})")
    ax.set_title(literal(title))
    ax.set_ylim(0, totals.max() * 1.1 if totals.max() > 0 else 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)  # beside, over nothing
    fig.subplots_adjust(right=0.72)
    return _save(fig, directory, stem)


# Figures drawn once for several languages (figure_jobs; their names in figure_jobs.VERSIONED): each function's
# name to its form that takes versions. Their arguments end with title, directory and stem, then the words.
VERSIONED = {"binned_histograms": binned_histograms_versions, "measured_histograms": measured_histograms_versions,
             "roofline_physical": roofline_physical_versions, "roofline_normalized": roofline_normalized_versions,
             "per_kernel_rooflines": per_kernel_rooflines_versions, "measured_roofline": measured_roofline_versions}


# Drawn by name in a figure helper like the functions above (report/critical_path.py plans it).
from kernelscope.report.path_figure import critical_path_bars  # noqa: E402, F401
