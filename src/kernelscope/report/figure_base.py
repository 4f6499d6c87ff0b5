"""What every figure shares: matplotlib set up for files, the palette, plain log ticks, saving in the formats
asked for, one figure saved once per language (`Version`), label placement, and text drawn as written."""

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
from matplotlib import font_manager, ticker  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from kernelscope.report import figure_formats, figure_versions  # noqa: E402
from kernelscope.report.figure_inputs import (  # noqa: E402
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


def plain_log_ticks(fig: plt.Figure) -> None:
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(ticker.FuncFormatter(_power_of_ten))
                # Unlabelled minor ticks at 2…9 of each decade: drawn, but no longer located and formatted
                # by the default machinery (a second of every report).
                axis.set_minor_locator(ticker.NullLocator())
                axis.set_minor_formatter(ticker.NullFormatter())


def save_figure(fig: plt.Figure, directory: Path, stem: str, fitted: bool = False) -> list[Path]:
    """The figure in each format asked for (figure_formats; the first, PNG, is the one the report links), then
    closed. A figure not `fitted` by its maker (fixed margins) is laid out once here; bbox_inches="tight" would
    draw it twice per file."""
    paths = _write(fig, directory, stem, fitted)
    plt.close(fig)
    return paths


def _write(fig: plt.Figure, directory: Path, stem: str, fitted: bool = False) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    plain_log_ticks(fig)
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


def one_version(title: str, directory: Path, stem: str, words: dict[str, Any] | None) -> list[Version]:
    return [Version(title, directory, stem, words or words_for())]


def save_versions(fig: plt.Figure, versions: list[Version], label: Callable[[Version], None]) -> list[list[Path]]:
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
            plain_log_ticks(fig)
            return figure_versions.save_png_versions(
                fig, versions, labelled, lambda version: figure_formats.figure_files(version.directory, version.stem))
        out = []
        for index, version in enumerate(versions):
            with words_of(version):
                label(version)
                last = index == len(versions) - 1  # the last save closes the figure
                out.append((save_figure if last else _write)(fig, version.directory, version.stem, fitted=True))
    except BaseException:
        plt.close(fig)
        raise
    return out


def group_colors(groups: list[str]) -> dict[str, tuple]:
    return {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(sorted(set(groups)))}


def point_sizes(dur: np.ndarray) -> np.ndarray:
    return 15 + 400 * dur / max(dur.max(), 1)


def cjk_font(families: list[str]) -> str | None:
    """The first of `families` installed here (matplotlib's font list), or None."""
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((family for family in families if family in installed), None)


def term(words: dict[str, Any], value: str) -> str:
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


def legend_beside(ax: plt.Axes) -> None:
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


def short_label(name: str, limit: int = 28) -> str:
    """A kernel's name as a label: whole, wrapped onto lines of about `limit` characters (never cut short).
    Raw C++ signatures lose their parameter list; catalog names keep their details in parentheses."""
    text = name.removeprefix("void ")
    if "::" in text or "<" in text:
        text = text.split("(")[0]
    return literal(_wrapped(text, limit))
