"""One figure saved as PNG in several languages over a single drawing of what the languages share.

A report draws each figure once per language, and the languages differ only in their words: titles, axis labels,
legends, notes. Drawing the whole figure for every language spent most of each save on what does not change
(axes, ticks, grid lines, numeric tick labels, the data). Here the shared part is drawn once with every worded
artist left unpainted and kept as a pixel buffer; each language restores that buffer, paints its worded artists
on top in the order a whole drawing would, and writes the buffer as PNG: the same pixels as a whole drawing of
that language, except that the numeric tick labels are drawn once, in the first language's font."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axis import Axis, Tick
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text

from kernelscope.report import png_file

PNG_DPI = 150  # every figure file, PNG and SVG (figure_base._write)
# What Pillow is told where matplotlib saves a PNG itself (one language, or SVG as well): zlib level 1, as png_file.
PNG_OPTIONS = {"compress_level": png_file.COMPRESSION_LEVEL}


def worded_artists(fig: Figure) -> list[Artist]:
    """The visible artists that carry words, in the order a whole drawing of `fig` draws them: in each axes (in
    the figure's order) by z-order, then the figure's own by z-order. Words are every text but tick labels (numbers:
    a version that sets tick labels as words is drawn whole, save_png_versions) and every legend."""
    ordered: list[Artist] = []
    for ax in fig.axes:
        if ax.get_visible():
            ordered += sorted(_worded_children(ax), key=lambda artist: artist.get_zorder())
    ordered += sorted(_worded_children(fig, skip=tuple(fig.axes)), key=lambda artist: artist.get_zorder())
    return [artist for artist in dict.fromkeys(ordered) if artist.get_visible()]  # each once (painted once)


def _worded_children(container: Artist, skip: tuple[Artist, ...] = ()) -> Iterator[Artist]:
    for child in container.get_children():
        if child in skip or isinstance(child, Tick):
            continue
        if isinstance(child, Legend):
            yield child
        elif isinstance(child, Axis):
            yield child.label  # its tick labels and offset text ("1e6") are numbers
        elif isinstance(child, Text):
            yield child
        else:
            yield from _worded_children(child)


@contextmanager
def _not_painted(artists: list[Artist]) -> Iterator[None]:
    """`artists` left out of a drawing of their figure, yet visible: hidden, a title would be moved off the figure
    and a legend placed elsewhere, since layout measures only what is visible."""
    for artist in artists:
        artist.draw = _paint_nothing  # type: ignore[method-assign]  # an instance attribute shadows the method
    try:
        yield
    finally:
        for artist in artists:
            del artist.draw


def _paint_nothing(renderer: Any) -> None:
    return None


@contextmanager
def _dpi(fig: Figure, dpi: float) -> Iterator[None]:
    before = fig.dpi
    fig.dpi = dpi
    try:
        yield
    finally:
        fig.dpi = before


def save_png_versions(fig: Figure, versions: list[Any], label: Callable[[Any], None],
                      files: Callable[[Any], list[Path]]) -> list[list[Path]]:
    """Labels `fig` for each of `versions` (label(version) writes its words, in its fonts) and writes it to the PNG
    files(version) names (PNG only). `fig` must be laid out already: its layout may not depend on the words.
    The words are labelled at the figure's own dpi, as a whole save would, and drawn at PNG_DPI. A version whose
    words changed how an axis makes its ticks (tick labels set as words) is drawn whole, as is every later one."""
    canvas = fig.canvas
    written: list[list[Path]] = []
    background = first_ticks = None
    for version in versions:
        label(version)
        worded = worded_artists(fig)
        ticks = _tick_makers(fig)
        first_ticks = first_ticks or ticks
        whole = len(ticks) != len(first_ticks) or any(a is not b for a, b in zip(ticks, first_ticks, strict=False))
        with _dpi(fig, PNG_DPI):
            if whole:
                canvas.draw()
            else:
                if background is None:
                    with _not_painted(worded):
                        canvas.draw()
                    background = canvas.get_renderer().copy_from_bbox(fig.bbox)
                renderer = canvas.get_renderer()
                renderer.restore_region(background)
                for artist in worded:
                    artist.draw(renderer)
            paths = files(version)
            pixels = np.asarray(canvas.get_renderer().buffer_rgba())
            for path in paths:
                path.parent.mkdir(parents=True, exist_ok=True)
                png_file.write_png(path, pixels, fig.dpi)
        written.append(paths)
    plt.close(fig)
    return written


def _tick_makers(fig: Figure) -> list[Any]:
    """The locators and formatters of every axis: what makes the ticks and their labels."""
    return [maker for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
            for maker in (axis.get_major_locator(), axis.get_major_formatter(), axis.get_minor_locator(),
                          axis.get_minor_formatter())]
