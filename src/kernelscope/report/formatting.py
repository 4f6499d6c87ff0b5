"""Number and table formatting for reports: units, Markdown cells, the one Markdown table writer."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any


def missing(value: Any) -> bool:
    """No number to print: None, or a float that is not finite (0/0 of an empty group, a rate of no time): a
    report shows "–" for it, never `nan` or `inf`."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def duration(ns: float | None) -> str:
    """Adaptive units like `nsys stats`: 850 ns, 12.345 µs, 3.210 ms, 1.234 s."""
    if missing(ns):
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
    return "–" if missing(value) else f"{value:,.{digits}f} ms"


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if missing(value) else f"{value:.{digits}f}%"


def ratio_percent(value: float | None, digits: int = 2) -> str:
    return "–" if missing(value) else f"{100 * value:.{digits}f}%"


def number(value: float | int | None, digits: int = 0) -> str:
    if missing(value):
        return "–"
    if isinstance(value, int) or digits == 0:
        return f"{round(value):,}"
    return f"{value:,.{digits}f}"


def joules(value: float | None) -> str:
    """Joules from a kilojoule to a millijoule: '12.3 J', '0.41 mJ'."""
    if missing(value):
        return "–"
    return f"{value:,.1f} J" if abs(value) >= 1 else f"{value * 1e3:,.2f} mJ"


def watts(value: float | None) -> str:
    return "–" if missing(value) else f"{value:,.0f} W"


def gigabytes(value: float | None) -> str:
    """Bytes in GB with two decimals; amounts under 10 MB in the unit they reach (never "0.00 GB")."""
    if missing(value):
        return "–"
    return f"{value / 1e9:.2f} GB" if abs(value) >= 1e7 else byte_amount(value)


def _scaled(value: float, unit: str, steps: tuple[tuple[float, str, int], ...]) -> str:
    """`value` in the largest prefix it reaches (steps: threshold, prefix, decimals; largest first), so a small
    workload never reads 0.000 of a large unit."""
    if missing(value):
        return "–"
    for threshold, prefix, digits in steps:
        if abs(value) >= threshold:
            return f"{value / threshold:,.{digits}f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"  # below the smallest prefix: whole units (0 B, 512 B)


def bandwidth(value: float | None) -> str:
    """Bytes per second: TB/s (3 decimals) down to MB/s."""
    if value is None:
        return "–"
    return _scaled(value, "B/s", ((1e12, "T", 3), (1e9, "G", 1), (1e6, "M", 1), (1e3, "k", 1)))


def flop_rate(value: float | None) -> str:
    """FLOP per second: TFLOP/s (2 decimals) down to MFLOP/s."""
    if value is None:
        return "–"
    return _scaled(value, "FLOP/s", ((1e12, "T", 2), (1e9, "G", 1), (1e6, "M", 1), (1e3, "k", 1)))


def byte_amount(value: float | None) -> str:
    """Bytes: GB (2 decimals) down to KB."""
    if value is None:
        return "–"
    return _scaled(value, "B", ((1e9, "G", 2), (1e6, "M", 1), (1e3, "K", 1)))


def flop_amount(value: float | None) -> str:
    """FLOPs: GFLOP (2 decimals) down to kFLOP."""
    if value is None:
        return "–"
    return _scaled(value, "FLOP", ((1e9, "G", 2), (1e6, "M", 1), (1e3, "k", 1)))


class Markdown(str):
    """Text that is already Markdown written by kernelscope (a table, a sentence of the page's words, an escaped
    value): templates print it as is. Every other string is input data and is escaped (templating.py)."""


# Line breaks and other control characters of an input would start new blocks (headings, table rows): one space.
_BREAKS = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")
# Every ASCII character that can open Markdown: raw HTML, entities, links and images (`[`, `![`: a `(` after them
# no longer matters), emphasis, code, table cells; `#` opens a heading only at the start of a line.
_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~!&"})


def one_line(text: Any) -> str:
    return _BREAKS.sub(" ", str(text))


def code(text: Any) -> Markdown:
    """A string read from an input as inline code in a table cell: a fence longer than any run of backticks inside
    it (so the text cannot close the span and continue as markup), pipes escaped (a table reads `\\|` inside code
    as a pipe), kept on one line. Nothing to show (None, or only spaces: an empty code span is no markup) is a dash."""
    if text is None or not str(text).strip():
        return Markdown("–")
    return inline_code(one_line(text).replace("|", "\\|"))


def inline_code(text: Any) -> Markdown:
    """A string read from an input as inline code in a sentence, outside tables (where `\\|` would print its
    backslash): code() without the pipes escaped."""
    if text is None or not str(text).strip():
        return Markdown("–")
    text = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")


def markdown_text(text: Any) -> Markdown:
    """A string read from an input, as literal Markdown text: every character that could start markup is
    backslash-escaped, and it stays on one line."""
    if text is None:
        return Markdown("–")
    escaped = one_line(text).translate(_MARKDOWN_SPECIAL)
    return Markdown(re.sub(r"^(\s*)([#>+=-])", r"\1\\\2", escaped))


def plain(text: Any) -> Markdown:
    """A table cell of input text: literal, like markdown_text."""
    return markdown_text(text)


def escape_value(value: Any) -> Any:
    """Jinja's finalize: a plain string printed by a template is input data, so it is escaped; Markdown of ours
    and numbers pass unchanged."""
    if isinstance(value, Markdown) or not isinstance(value, str):
        return value
    return markdown_text(value)


def markdown_table(titles: Sequence[str], right_aligned: Sequence[bool], rows: Iterable[Sequence[str]]) -> Markdown:
    """The one GitHub Markdown table writer: cells are already formatted (and escaped) text."""
    align = ["---:" if right else "---" for right in right_aligned]
    lines = ["| " + " | ".join(titles) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return Markdown("\n".join(lines))
