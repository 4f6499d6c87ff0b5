"""Read Nsight Compute exports: CSV in both layouts (`--page raw`: one row per launch, one column per metric,
a units row under the header; `--page details`: one row per metric with Section / Metric Name / Metric Unit /
Metric Value), a directory of per-kernel `ncu.details.csv` files, and `.ncu-rep` files (through ncu itself, or
its `ncu_report` Python module).

Output: one row per profiled launch with the standard columns (docs/run-format.md, ncu.parquet) and every
collected metric in a long table beside it, values in base units (ns, byte, byte/second, %, …)."""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kernelscope.capture.nsight_compute import TENSOR_OPS
from kernelscope.errors import UserError
from kernelscope.load.names import bounded

# Unit → (base unit, factor). Both the raw page's names (usecond, Mbyte/second) and the details page's
# short names (us, MB/s) are accepted.
UNITS: dict[str, tuple[str, float]] = {
    "nsecond": ("ns", 1), "ns": ("ns", 1), "usecond": ("ns", 1e3), "us": ("ns", 1e3), "msecond": ("ns", 1e6),
    "ms": ("ns", 1e6), "second": ("ns", 1e9), "s": ("ns", 1e9),
    "byte": ("byte", 1), "B": ("byte", 1), "Kbyte": ("byte", 1e3), "KB": ("byte", 1e3), "Mbyte": ("byte", 1e6),
    "MB": ("byte", 1e6), "Gbyte": ("byte", 1e9), "GB": ("byte", 1e9), "Tbyte": ("byte", 1e12), "TB": ("byte", 1e12),
    "Kibyte": ("byte", 1024), "KiB": ("byte", 1024), "Mibyte": ("byte", 2**20), "MiB": ("byte", 2**20),
    "byte/second": ("byte/second", 1), "B/s": ("byte/second", 1), "Kbyte/second": ("byte/second", 1e3),
    "KB/s": ("byte/second", 1e3), "Mbyte/second": ("byte/second", 1e6), "MB/s": ("byte/second", 1e6),
    "Gbyte/second": ("byte/second", 1e9), "GB/s": ("byte/second", 1e9), "Tbyte/second": ("byte/second", 1e12),
    "TB/s": ("byte/second", 1e12), "byte/s": ("byte/second", 1), "Kbyte/s": ("byte/second", 1e3),
    "Mbyte/s": ("byte/second", 1e6), "Gbyte/s": ("byte/second", 1e9), "Tbyte/s": ("byte/second", 1e12),
    "%": ("%", 1), "cycle": ("cycle", 1), "Kcycle": ("cycle", 1e3), "Mcycle": ("cycle", 1e6),
    "cycle/nsecond": ("cycle/second", 1e9), "cycle/usecond": ("cycle/second", 1e6), "cycle/second": ("cycle/second", 1),
    "hz": ("hz", 1), "Hz": ("hz", 1), "Khz": ("hz", 1e3), "KHz": ("hz", 1e3), "Mhz": ("hz", 1e6), "MHz": ("hz", 1e6),
    "Ghz": ("hz", 1e9), "GHz": ("hz", 1e9),
    "inst": ("inst", 1), "Kinst": ("inst", 1e3), "Minst": ("inst", 1e6), "Ginst": ("inst", 1e9),
    "sector": ("sector", 1), "Ksector": ("sector", 1e3), "Msector": ("sector", 1e6),
    "request": ("request", 1), "Krequest": ("request", 1e3),
}

# Standard columns of ncu.parquet: the raw-page metric names first, then the details-page names that carry
# the same quantity (section, metric). First one present wins.
STANDARD: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "duration_ns": (["gpu__time_duration.sum"], [("GPU Speed Of Light Throughput", "Duration")]),
    "sm_throughput_pct": (["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
                          [("GPU Speed Of Light Throughput", "Compute (SM) Throughput")]),
    "dram_throughput_pct": (["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                             "dram__throughput.avg.pct_of_peak_sustained_elapsed"],
                            [("GPU Speed Of Light Throughput", "DRAM Throughput")]),
    "mem_throughput_pct": (["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
                           [("GPU Speed Of Light Throughput", "Memory Throughput")]),
    "l1tex_throughput_pct": (["l1tex__throughput.avg.pct_of_peak_sustained_active"],
                             [("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput")]),
    "l2_throughput_pct": (["lts__throughput.avg.pct_of_peak_sustained_elapsed"],
                          [("GPU Speed Of Light Throughput", "L2 Cache Throughput")]),
    "l1_hit_rate_pct": (["l1tex__t_sector_hit_rate.pct"], [("Memory Workload Analysis", "L1/TEX Hit Rate")]),
    "l2_hit_rate_pct": (["lts__t_sector_hit_rate.pct"], [("Memory Workload Analysis", "L2 Hit Rate")]),
    "achieved_occupancy_pct": (["sm__warps_active.avg.pct_of_peak_sustained_active"],
                               [("Occupancy", "Achieved Occupancy")]),
    "theoretical_occupancy_pct": (["sm__maximum_warps_per_active_cycle_pct"], [("Occupancy", "Theoretical Occupancy")]),
    # (matched against the details page of the same launches: Mem Busy is the access throughput, Max Bandwidth
    # the request throughput)
    "mem_busy_pct": (["gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed"],
                     [("Memory Workload Analysis", "Mem Busy")]),
    "max_bandwidth_pct": (["gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed"],
                          [("Memory Workload Analysis", "Max Bandwidth")]),
    "memory_throughput_bps": (["dram__bytes.sum.per_second"], [("Memory Workload Analysis", "Memory Throughput")]),
    "dram_read_bytes": (["dram__bytes_read.sum"], []),
    "dram_write_bytes": (["dram__bytes_write.sum"], []),
    "registers_per_thread": (["launch__registers_per_thread"], [("Launch Statistics", "Registers Per Thread")]),
}

# FLOPs from executed instruction counts (per thread, predicated on): an FMA is two operations.
FLOP_COUNTERS = {
    "fp64": [("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2), ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1)],
    "fp32": [("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2), ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1)],
    "fp16": [("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 2), ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 1),
             ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 1)],
}

# The base unit each standard column's metric must come in: a value in an unknown or unexpected unit would be
# read as something it is not (3 "parsecs" of duration as 3 ns), so it is refused. Counts carry "inst" or none.
_COUNT_UNITS = frozenset({"", "inst"})
EXPECTED_UNITS: dict[str, frozenset[str]] = {
    column: frozenset({"ns"}) if column == "duration_ns" else
    frozenset({"%"}) if column.endswith("_pct") else
    frozenset({"byte/second"}) if column == "memory_throughput_bps" else
    frozenset({"byte"}) if column.endswith("_bytes") else
    frozenset({"register/thread", ""})
    for column in STANDARD
}


def _expected_units() -> tuple[dict[str, frozenset[str]], dict[tuple[str, str], frozenset[str]]]:
    """Metric name → allowed base units, and (section, metric) → allowed base units, of every metric read."""
    by_name = {name: EXPECTED_UNITS[column] for column, (names, _) in STANDARD.items() for name in names}
    by_name |= {metric: _COUNT_UNITS for counters in FLOP_COUNTERS.values() for metric, _ in counters}
    by_section = {pair: EXPECTED_UNITS[column] for column, (_, pairs) in STANDARD.items() for pair in pairs}
    return by_name, by_section


READ_BY_NAME, READ_BY_SECTION = _expected_units()
MISSING_VALUES = frozenset({"", "n/a", "-", "N/A"})


def checked_value(path: Path, launch: int, metric: str, unit: str, text: str,
                  allowed: frozenset[str] | None) -> tuple[float | None, str]:
    """A metric's value in base units; for a metric kernelscope reads (`allowed` its base units), an unknown or
    unexpected unit, a value that is not a finite number, or a negative one is refused, naming the launch and the
    metric."""
    value, base = normalize(parse_number(text), unit)
    if allowed is None:
        return value, base
    where = f"{path}: launch {launch}: {metric}"
    if unit.strip() and unit.strip() not in UNITS and unit.strip() not in allowed:
        raise UserError(f"{where}: unknown unit {unit.strip()[:40]!r}")
    if base not in allowed:
        raise UserError(f"{where}: unit {unit.strip()[:40]!r} is not one this metric is measured in")
    if text.strip() in MISSING_VALUES:
        return None, base
    if value is None:
        raise UserError(f"{where}: {text.strip()[:40]!r} is not a finite number")
    if value < 0:
        raise UserError(f"{where}: negative value {text.strip()[:40]!r}")
    return value, base


ID_COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC"]


@dataclass
class NcuTables:
    launches: pl.DataFrame  # one row per profiled launch
    metrics: pl.DataFrame  # long: launch, metric, section, unit, value (base units)


def parse_number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "-", "N/A"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def normalize(value: float | None, unit: str) -> tuple[float | None, str]:
    base, factor = UNITS.get(unit.strip(), (unit.strip(), 1.0))
    return (None if value is None else value * factor), base


def _csv_rows(path: Path, text: str) -> list[list[str]]:
    # ncu prints ==PROF==/==WARNING== lines before the CSV; the header is the first line starting with "ID".
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        raise UserError(f"{path}: not an Nsight Compute CSV export (no header row starting with \"ID\")")
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def read_ncu_csv(path: Path) -> NcuTables:
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    rows = _csv_rows(path, text)
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _from_details(path, header, rows[1:])
    return _from_raw(path, header, rows[1:])


def _launch_id(path: Path, value: str) -> int:
    """A launch's ID: a whole number within int64, as ncu writes it (thousands separators allowed)."""
    text = value.strip().replace(",", "")
    if not text.isdigit() or int(text) >= 2**63:
        raise UserError(f"{path}: launch ID {value[:40]!r} is not a launch number")
    return int(text)


def _from_raw(path: Path, header: list[str], rows: list[list[str]]) -> NcuTables:
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise UserError(f"{path}: Nsight Compute raw CSV lacks column(s) {', '.join(missing)}")
    rows = [row for row in rows if any(cell.strip() for cell in row)]  # blank lines carry nothing
    units = rows[0] if rows and not rows[0][0].strip().replace(",", "").isdigit() else [""] * len(header)
    data = rows[1:] if units is rows[0] else rows
    if not data:
        raise UserError(f"{path}: an Nsight Compute CSV with a header but no profiled launch")
    launches, metrics = [], []
    for row in data:
        if len(row) < len(header):
            raise UserError(f"{path}: truncated row for launch {row[0] if row else '?'}")
        record = dict(zip(header, row, strict=False))
        launch = _launch_id(path, record["ID"])
        launches.append(_identity(path, record))
        for column, unit in zip(header, units, strict=False):
            if column in ID_COLUMNS:
                continue
            allowed = READ_BY_NAME.get(column, _COUNT_UNITS if TENSOR_OPS.match(column) else None)
            value, base = checked_value(path, launch, column, unit, record[column], allowed)
            metrics.append((launch, column, "", base, value, record[column]))
    return _tables(path, launches, metrics)


def _from_details(path: Path, header: list[str], rows: list[list[str]]) -> NcuTables:
    needed = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    missing = [c for c in needed if c not in header]
    if missing:
        raise UserError(f"{path}: Nsight Compute details CSV lacks column(s) {', '.join(missing)}")
    launches: dict[int, dict] = {}
    metrics = []
    last = max(header.index(c) for c in needed)
    for row in rows:
        if len(row) <= last:  # rule columns at the end may be absent
            continue
        record = dict(zip(header, row, strict=False))
        launch = _launch_id(path, record["ID"])
        launches.setdefault(launch, _identity(path, record))
        metric, section = record["Metric Name"], record["Section Name"]
        allowed = READ_BY_SECTION.get((section, metric)) or READ_BY_NAME.get(metric)
        value, base = checked_value(path, launch, metric, record["Metric Unit"], record["Metric Value"], allowed)
        metrics.append((launch, record["Metric Name"], record["Section Name"], base, value, record["Metric Value"]))
    return _tables(path, list(launches.values()), metrics)


def _identity(path: Path, record: dict[str, str]) -> dict:
    grid = _triple(record.get("Grid Size", ""))
    block = _triple(record.get("Block Size", ""))
    return {
        "launch": _launch_id(path, record["ID"]),
        "kernel_name": bounded(record["Kernel Name"]),
        "device": _int(record.get("Device")),
        "context": _int(record.get("Context")),
        "stream": _int(record.get("Stream")),
        "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
        "block_x": block[0], "block_y": block[1], "block_z": block[2],
    }


def _int(text: str | None) -> int | None:
    value = parse_number(text or "")
    return int(value) if value is not None and finite(value) and abs(value) < 2**63 else None


def _triple(text: str) -> tuple[int | None, int | None, int | None]:
    numbers = [int(n) if len(n) < 19 else None for n in re.findall(r"\d+", text)]
    return tuple((numbers + [None, None, None])[:3]) if numbers else (None, None, None)


def _tables(path: Path, launches: list[dict], metrics: list[tuple]) -> NcuTables:
    if not launches:
        raise UserError(f"{path}: no profiled kernels in this Nsight Compute export")
    long = pl.DataFrame(metrics, orient="row", schema={"launch": pl.Int64, "metric": pl.String, "section": pl.String,
                                                        "unit": pl.String, "value": pl.Float64, "text": pl.String})
    wide = pl.DataFrame(launches).with_columns(pl.col("launch").cast(pl.Int64))
    return NcuTables(launches=wide.join(standard_columns(long), on="launch", how="left"), metrics=long)


def standard_columns(long: pl.DataFrame) -> pl.DataFrame:
    """Per launch: the standard columns, derived DRAM bytes and FLOPs, from whatever metrics were collected."""
    by_name: dict[int, dict[str, float | None]] = {}
    by_section: dict[int, dict[tuple[str, str], float | None]] = {}
    for launch, metric, section, value in long.select("launch", "metric", "section", "value").iter_rows():
        by_name.setdefault(launch, {}).setdefault(metric, value)
        by_section.setdefault(launch, {})[(section, metric)] = value
    records = []
    for launch, names in by_name.items():
        sections = by_section[launch]
        row: dict[str, float | None] = {"launch": launch}
        for column, (raw_names, detail_names) in STANDARD.items():
            raw = [names[n] for n in raw_names if names.get(n) is not None]
            detail = [sections[k] for k in detail_names if sections.get(k) is not None]
            row[column] = (raw or detail or [None])[0]
        read, write = row.pop("dram_read_bytes"), row.pop("dram_write_bytes")
        row["dram_bytes"] = None if read is None and write is None else (read or 0) + (write or 0)
        duration = row.pop("duration_ns")
        row["duration_us"] = None if duration is None else duration / 1e3
        flops = {p: _flops(names, counters) for p, counters in FLOP_COUNTERS.items()}
        tensor = [v for m, v in names.items() if TENSOR_OPS.match(m) and v is not None]
        flops["tensor"] = float(sum(tensor)) if tensor else None
        for precision, value in flops.items():
            row[f"flops_{precision}"] = value
        present = [v for v in flops.values() if v is not None]
        row["flops"] = float(sum(present)) if present else None
        records.append(row)
    columns = ["duration_us", *[c for c in STANDARD if c not in ("dram_read_bytes", "dram_write_bytes", "duration_ns")],
               "dram_bytes", "flops", "flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor"]
    schema = {"launch": pl.Int64, **{c: pl.Float64 for c in columns}}
    return pl.DataFrame(records, schema=schema).select("launch", *columns)


def _flops(names: dict[str, float | None], counters: list[tuple[str, int]]) -> float | None:
    values = [(names.get(metric), weight) for metric, weight in counters]
    if all(v is None for v, _ in values):
        return None
    return float(sum((v or 0) * w for v, w in values))


def read_ncu_directory(path: Path) -> NcuTables:
    """The layout of one sub-directory per kernel, each with an ncu.details.csv (or any *.csv)."""
    files = sorted(path.glob("*/ncu.details.csv")) or sorted(path.glob("*/*.csv")) or sorted(path.glob("*.csv"))
    if not files:
        raise UserError(f"{path}: no Nsight Compute CSV files (expected <kernel>/ncu.details.csv)")
    parts, offset = [], 0
    for file in files:
        tables = read_ncu_csv(file)
        # Launch ids restart in every file: shift them so that they stay unique, and keep the source.
        shift = offset - int(tables.launches["launch"].min())
        parts.append(NcuTables(
            tables.launches.with_columns(pl.col("launch") + shift, pl.lit(file.parent.name).alias("source")),
            tables.metrics.with_columns(pl.col("launch") + shift),
        ))
        offset += int(tables.launches["launch"].max()) - int(tables.launches["launch"].min()) + 1
    return NcuTables(pl.concat([p.launches for p in parts], how="diagonal_relaxed"),
                     pl.concat([p.metrics for p in parts], how="vertical_relaxed"))


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def is_ncu_input(path: Path) -> bool:
    """An Nsight Compute export: a directory of per-kernel exports, an .ncu-rep, or a CSV with ncu's columns."""
    if path.is_dir() or path.suffix == ".ncu-rep":
        return True
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    with path.open("r", encoding="utf-8", errors="replace") as f:
        head = f.read(65536)
    return '"ID"' in head and "Kernel Name" in head
