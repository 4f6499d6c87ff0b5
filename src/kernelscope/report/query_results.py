"""A query's rows as text: an aligned table for the terminal, CSV, or JSON. Values are data: control characters
are shown escaped in the table (a name from a trace cannot move the cursor or recolour the terminal), and CSV
and JSON are written by their standard writers."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from kernelscope import inert

MAX_CELL = 80  # characters of a table cell; longer values end in …


def table_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned plain-text table with a header line; numbers right-aligned."""
    header = [_cell(c) for c in columns]
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(isinstance(r[i], int | float | Decimal) or r[i] is None for r in rows)
               for i in range(len(columns))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out) + "\n"


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if v is None else _csv_value(_plain(v)) for v in row] for row in rows])
    return buffer.getvalue()


def json_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A JSON array of objects, one per row (NaN and infinities as null: JSON has no such numbers)."""
    records = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
    return json.dumps(records, indent=1, ensure_ascii=False) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def _csv_value(value: Any) -> Any:
    return inert.csv_cell(value) if isinstance(value, str) else value


def _cell(value: Any) -> str:
    if value is None:
        text = ""
    elif isinstance(value, float):
        text = f"{value:.6g}" if math.isfinite(value) else str(value)
    else:
        text = str(_plain(value))
    text = inert.terminal(text)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"
