"""Strings read from inputs made inert where they are shown outside a report: a CSV cell that a spreadsheet would
run as a formula, and text for a terminal that would move the cursor, recolour the screen or reorder the line."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # polars only where a frame is made inert: the command line (kernels, --help) loads none
    import polars as pl

# A cell starting with one of these is a formula to Excel, LibreOffice and Google Sheets.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"  # the spreadsheets' own mark for "text, not a formula": it is not shown in the cell
# Cells that get the mark: formulas, and text that already starts with marks before one (so that the mark can be
# taken off again without ambiguity).
_NEEDS_QUOTE = re.compile(r"^'*[=+\-@\t\r]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def csv_cell(text: str) -> str:
    """`text` as a CSV cell no spreadsheet evaluates."""
    return QUOTE + text if _NEEDS_QUOTE.match(text) else text


def csv_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """The text columns of `frame` made inert cell by cell (numbers stay numbers)."""
    import polars as pl

    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not text:
        return frame
    return frame.with_columns(
        pl.when(pl.col(name).str.contains(_NEEDS_QUOTE.pattern)).then(pl.lit(QUOTE) + pl.col(name)).otherwise(pl.col(name))
        .alias(name) for name in text)


def from_csv_cell(text: str) -> str:
    """A cell written by csv_cell, as the text it was."""
    return text[1:] if text.startswith(QUOTE) and _NEEDS_QUOTE.match(text[1:]) else text


def terminal(text: str) -> str:
    """`text` with control characters (escape sequences, bidirectional overrides, line separators) shown as
    escapes instead of acting on the terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if m.group().isascii() else f"\\u{ord(m.group()):04x}", text)
