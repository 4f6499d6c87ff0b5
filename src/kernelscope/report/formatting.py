"""Number and table formatting for reports: units, Markdown cells, the one Markdown table writer."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


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


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|#~!"})


def markdown_text(text: Any) -> str:
    """A string read from an input, as literal Markdown text: every character that could start markup is
    backslash-escaped, and it stays on one line."""
    return "–" if text is None else str(text).translate(_MARKDOWN_SPECIAL).replace("\n", " ")


def plain(text: Any) -> str:
    return "–" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(titles: Sequence[str], right_aligned: Sequence[bool], rows: Iterable[Sequence[str]]) -> str:
    """The one GitHub Markdown table writer: cells are already formatted (and escaped) text."""
    align = ["---:" if right else "---" for right in right_aligned]
    lines = ["| " + " | ".join(titles) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)
