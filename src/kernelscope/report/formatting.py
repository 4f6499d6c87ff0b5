"""Number formatting for reports."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl


def duration(ns: float | None) -> str:
    """Adaptive units like `nsys stats`: 850 ns, 12.345 µs, 3.210 ms, 1.234 s."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    ns = float(ns)
    if abs(ns) < 1e3:
        return f"{ns:.0f} ns"
    if abs(ns) < 1e6:
        return f"{ns / 1e3:.3f} µs"
    if abs(ns) < 1e9:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def ms(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:,.{digits}f} ms"


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}%"


def ratio_percent(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def number(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) or digits == 0:
        return f"{round(value):,}"
    return f"{value:,.{digits}f}"


def gigabytes(value: float | None) -> str:
    return "–" if value is None else f"{value / 1e9:.2f} GB"


def code(text: Any) -> str:
    """Inline code in a Markdown table cell: escape pipes, keep it on one line."""
    if text is None:
        return "–"
    text = str(text).replace("|", "\\|").replace("\n", " ")
    return f"`{text}`"


def plain(text: Any) -> str:
    return "–" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


Column = tuple[str, str, Callable[[Any], str]]


def markdown_table(df: pl.DataFrame, columns: Sequence[Column], align_right: Sequence[str] = ()) -> str:
    """Render df as a GitHub Markdown table; columns are (header, column name, formatter)."""
    headers = [h for h, _, _ in columns]
    sep = ["---:" if h in align_right else "---" for h in headers]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    for row in df.iter_rows(named=True):
        lines.append("| " + " | ".join(fmt(row[col]) for _, col, fmt in columns) + " |")
    return "\n".join(lines)
