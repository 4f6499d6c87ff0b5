"""Read Nsight Systems kernel summaries: `nsys stats` reports cuda_gpu_kern_sum (gpukernsum in older nsys),
cuda_gpu_kern_gb_sum (with GridXYZ / BlockXYZ) and nvtx_kern_sum (per NVTX range, PID and TID), written as CSV
(`--format csv`), as tab-separated text (a table copied by hand, values with units such as `12.406 μs`), or as
nsys's fixed-width table (a header line underlined with dashes). docs/nsys.md describes what is accepted.

The header may come after other lines (nsys prints progress lines and several reports into one file): the first
line that names the kernel table's columns starts the table, and the first blank line ends it."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import polars as pl

from kernelscope import inert
from kernelscope.errors import UserError

SNIFF_BYTES = 256 * 1024

# Header cell, lower case and without its unit in parentheses → column.
HEADER_COLUMNS = {
    "time": "time_pct",
    "total time": "total_ns",
    "instances": "instances", "kern inst": "instances",
    "avg": "avg_ns", "average": "avg_ns", "mean": "avg_ns",
    "med": "med_ns", "median": "med_ns",
    "min": "min_ns", "minimum": "min_ns",
    "max": "max_ns", "maximum": "max_ns",
    "stddev": "stddev_ns", "std dev": "stddev_ns",
    "name": "name", "kernel name": "name",
    "nvtx range": "nvtx_range",
    "gridxyz": "grid", "blockxyz": "block",
    "pid": "pid", "tid": "tid",
    "kind": "kind",  # kernelscope's kern-sum export of a CPU-only run: `cpu_op` (its rows are CPU ops, not kernels)
}
REQUIRED = {"total_ns": "Total Time", "instances": "Instances", "name": "Name"}
DURATIONS = ["total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]
UNITS = {"ns": 1, "nsec": 1, "us": 1000, "usec": 1000, "μs": 1000, "µs": 1000, "ms": 10**6, "msec": 10**6,
         "s": 10**9, "sec": 10**9}
MISSING = {"", "-", "–", "nan", "n/a", "none"}

SCHEMA = {
    "name": pl.String, "total_ns": pl.Int64, "instances": pl.Int64, "avg_ns": pl.Float64, "med_ns": pl.Float64,
    "min_ns": pl.Float64, "max_ns": pl.Float64, "stddev_ns": pl.Float64, "time_pct": pl.Float64,
    "nvtx_range": pl.String,
}
EXTRA_SCHEMA = {"grid_x": pl.Int64, "grid_y": pl.Int64, "grid_z": pl.Int64, "block_x": pl.Int64,
                "block_y": pl.Int64, "block_z": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "kind": pl.String}

_UNIT_IN_HEADER = re.compile(r"^(.*?)\s*\(([^)]*)\)$")
_VALUE = re.compile(
    r"^([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+)\s*"
    r"(ns|nsec|us|usec|μs|µs|ms|msec|s|sec|%)?$"
)
_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")


@dataclass(frozen=True)
class Header:
    line: int  # index into the file's lines
    layout: str  # csv | tsv | table
    cells: list[str]  # header cells as written
    columns: list[str | None]  # kernelscope column of each cell (None: ignored)
    units: list[str | None]  # unit in the header cell's parentheses
    cuts: list[int] | None = None  # table layout: where each column starts


def is_nsys_stats(path: Path) -> bool:
    """Whether the file holds an nsys stats kernel summary (a header with Total Time, Instances and Name)."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as f:
            raw = f.read(SNIFF_BYTES)
    except OSError:
        return False
    # Binary files (gzip traces, SQLite exports, .ncu-rep) and JSON traces are not text tables.
    if b"\x00" in raw or raw[:2] == b"\x1f\x8b" or raw.lstrip()[:1] in (b"{", b"["):
        return False
    header, _ = _find_header(_lines(raw.decode("utf-8-sig", errors="replace")))
    return header is not None


def read_nsys_stats(path: Path) -> pl.DataFrame:
    """One row per summary line: name, total_ns, instances, avg_ns, med_ns, min_ns, max_ns, stddev_ns (null
    where the table lacks them), time_pct (as printed, null if absent), nvtx_range (null if absent); plus grid_x/y/z
    and block_x/y/z (cuda_gpu_kern_gb_sum) and pid, tid (nvtx_kern_sum) when the table has them."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if not path.is_file():
        raise UserError(f"{path}: not a file (expected an nsys stats CSV or text export)")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); save the nsys stats output as UTF-8") from None
    lines = _lines(text)
    if not any(line.strip() for line in lines):
        raise UserError(f"{path}: empty file")
    header, incomplete = _find_header(lines)
    if header is None:
        if incomplete is not None:
            missing = [label for column, label in REQUIRED.items() if column not in incomplete.columns]
            found = ", ".join(c for c in incomplete.cells if c)
            raise UserError(f"{path}: line {incomplete.line + 1}: missing column(s) {', '.join(missing)} "
                            f"(the header has: {found})")
        raise UserError(f"{path}: no nsys stats kernel summary header found (expected CSV, tab-separated or table "
                        f"columns including Total Time, Instances and Name, as `nsys stats --report "
                        f"cuda_gpu_kern_sum --format csv` writes them)")
    rows = _rows(path, lines, header)
    if not rows:
        raise UserError(f"{path}: line {header.line + 1}: the header is followed by no kernel rows")
    extra = {c: t for c, t in EXTRA_SCHEMA.items() if any(c in row for row in rows)}
    schema = {**SCHEMA, **extra}
    return pl.DataFrame([{c: row.get(c) for c in schema} for row in rows], schema=schema, orient="row")


def _lines(text: str) -> list[str]:
    return [line.rstrip("\r") for line in text.split("\n")]


def _find_header(lines: list[str]) -> tuple[Header | None, Header | None]:
    """The first header with every required column, else None and the first header-like line (to name what it
    lacks)."""
    incomplete = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        header = _as_header(lines, i)
        if header is None:
            continue
        known = {c for c in header.columns if c}
        if not ({"total_ns", "instances"} & known) or len(known) < 3:
            continue
        if all(c in known for c in REQUIRED):
            return header, None
        incomplete = incomplete or header
    return None, incomplete


def _as_header(lines: list[str], i: int) -> Header | None:
    line = lines[i]
    if "\t" in line:
        layout, cells, cuts = "tsv", line.split("\t"), None
    elif "," in line:
        cells = _csv_fields(line)
        if cells is None:
            return None
        layout, cuts = "csv", None
    elif i + 1 < len(lines) and _DASHES.match(lines[i + 1]):
        layout, cuts = "table", _cuts(lines[i + 1])
        cells = _slice(line, cuts)
    else:
        return None
    cells = [c.strip().strip('"').strip() for c in cells]
    columns, units = [], []
    seen: set[str] = set()
    for cell in cells:
        match = _UNIT_IN_HEADER.match(cell)
        base, unit = (match.group(1), match.group(2).strip()) if match else (cell, None)
        column = HEADER_COLUMNS.get(" ".join(base.lower().split()))
        if column in seen:
            column = None  # a repeated column: the first one counts
        seen.add(column or "")
        columns.append(column)
        units.append(unit)
    return Header(i, layout, cells, columns, units, cuts)


def _csv_fields(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return None


def _cuts(dashes: str) -> list[int]:
    """Column starts of a fixed-width table: halfway between the dash runs that underline the header."""
    runs = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    return [0] + [(runs[k - 1][1] + runs[k][0]) // 2 for k in range(1, len(runs))]


def _slice(line: str, cuts: list[int]) -> list[str]:
    return [line[start:end] for start, end in zip(cuts, [*cuts[1:], None], strict=True)]


def _rows(path: Path, lines: list[str], header: Header) -> list[dict]:
    start = header.line + (2 if header.layout == "table" else 1)
    rows = []
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.strip():
            break
        if header.layout == "tsv":
            fields = line.split("\t")
        elif header.layout == "csv":
            fields = _csv_fields(line)
            if fields is None:
                raise UserError(f"{path}: line {i + 1}: not a CSV line (unbalanced quotes or a stray line break)")
        else:
            fields = _slice(line, header.cuts or [0])
        while len(fields) > len(header.cells) and not fields[-1].strip():
            fields.pop()
        if len(fields) != len(header.cells):
            hint = " (a name with commas must be quoted)" if header.layout == "csv" else ""
            raise UserError(f"{path}: line {i + 1}: {len(fields)} fields, but the header has "
                            f"{len(header.cells)}{hint}")
        rows.append(_row(path, i + 1, header, fields))
    return rows


def _row(path: Path, number: int, header: Header, fields: list[str]) -> dict:
    row: dict = {}
    for cell, column, unit, raw in zip(header.cells, header.columns, header.units, fields, strict=True):
        if column is None:
            continue
        value = raw.strip()
        where = f"{path}: line {number}"
        if column == "name":
            if not value:
                raise UserError(f"{where}: empty kernel name")
            row["name"] = inert.from_csv_cell(value)  # a name kernelscope's own export kept from spreadsheets
        elif column == "nvtx_range":
            row["nvtx_range"] = value or None
        elif column == "kind":
            row["kind"] = value or None
        elif column in ("grid", "block"):
            parts = value.split()
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                for axis, part in zip("xyz", parts, strict=True):
                    row[f"{column}_{axis}"] = int(part) if int(part) < 2**63 else None
        elif column in ("pid", "tid"):
            row[column] = int(value) if value.isdigit() and int(value) < 2**63 else None
        elif value.lower() in MISSING and column not in REQUIRED:
            row[column] = None
        else:
            row[column] = _number(where, cell, column, unit, value)
    return row


MAX_NS = Decimal(2**62)  # ≈146 years: any larger total is corrupt, and would not fit the int64 tables


def _number(where: str, cell: str, column: str, header_unit: str | None, value: str) -> float | int:
    match = _VALUE.match(value)
    bad = f"{where}: cannot read {cell or column} value {value!r}"
    if match is None:
        raise UserError(bad)
    try:
        number = Decimal(match.group(1).replace(",", ""))
    except InvalidOperation:
        raise UserError(bad) from None
    unit = match.group(2)
    if column == "time_pct":
        if unit not in (None, "%"):
            raise UserError(f"{bad} (a percentage)")
        return float(number)
    if not number.is_finite():
        raise UserError(f"{bad} (not a finite number)")
    if column == "instances":
        if unit is not None or number != number.to_integral_value() or number < 1 or number >= 2**63:
            raise UserError(f"{bad} (a launch count: a whole number, at least 1)")
        return int(number)
    unit = unit or (header_unit if header_unit in UNITS else None) or "ns"
    if unit not in UNITS:
        raise UserError(f"{bad} (a duration)")
    ns = number * UNITS[unit]
    if ns < 0:
        raise UserError(f"{bad} (a negative duration)")
    if ns >= MAX_NS:
        raise UserError(f"{bad} (beyond {MAX_NS:.0e} ns: not a kernel time)")
    return int(ns.to_integral_value()) if column == "total_ns" else float(ns)
