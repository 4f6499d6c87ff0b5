"""Read, validate and write run directories (docs/run-format.md): the only module that knows their files.
Writes go into staging directories (load/staging.py) that are put in place whole."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from kernelscope.contracts.record import Record
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_files import (  # noqa: F401  (read elsewhere as rundir.TRACE, …)
    CALLS,
    CRITICAL_PATH,
    ENERGY,
    KERNELS,
    NCU,
    NCU_DIR,
    NCU_METRICS,
    OPS,
    POWER,
    REPORT_DIR,
    RUN_JSON,
    SUMMARY_JSON,
    TRACE,
    TRACES_DIR,
)
from kernelscope.contracts.run_info import SCHEMA_VERSION, RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.contracts.tables import costs_stored
from kernelscope.errors import UserError
from kernelscope.load.budget import MEMORY_BUDGET_ENV, memory_budget
from kernelscope.load.constant_columns import footer_metadata, read_skipping_constants
from kernelscope.load.energy_files import read_energy_tables
from kernelscope.load.run_records import decode_plain, decode_record, decode_summary


def rank_report_dir(rank: int) -> str:
    """Where `kernelscope report RUN --rank K` writes the report of one rank of a run of several."""
    return f"{REPORT_DIR}-rank{rank}"


def rank_trace(rank: int) -> str:
    """Where a rank's trace is kept in the run directory (runs of several ranks)."""
    return f"{TRACES_DIR}/rank{rank}.json.gz"


def default_run_path(runs_dir: Path, model: str, device: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{_slug(model)}-{_slug(device)}-{stamp}"
    path = runs_dir / base
    n = 1
    while path.exists():
        n += 1
        path = runs_dir / f"{base}-{n}"
    return path


def _slug(text: str) -> str:
    text = re.sub(r"^nvidia\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "run"


def write_json(path: Path, data: Any) -> None:
    if isinstance(data, Record):
        path.write_text(data.to_json(), encoding="utf-8")
        return
    if isinstance(data, msgspec.Struct):
        data = msgspec.to_builtins(data)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _write_table(table: pl.DataFrame, path: Path) -> None:
    """One row group: Polars reads each row group as a chunk of its own, and a table in several chunks is copied
    into one when a run is read (contracts.tables.conform). A 4 GB trace's run (1.55 M kernels) reports in 3.81 s
    at a 1.86 GB peak from one row group, 3.98 s and 1.99 GB from 13 (2 cores, 2026-11-27,
    benchmarks/results/report-speed-2026-11-27-i.json)."""
    table.write_parquet(path, compression="zstd", row_group_size=max(table.height, 1),
                        metadata=footer_metadata(table) or None)


def write_run(directory: Path, run: Run, summary: Summary, critical_path: pl.DataFrame | None = None) -> None:
    """run.json, summary.json and the tables of `run` into `directory` (a staging directory); critical_path: the
    segments of every step's critical path (analyze/paths/critical_path), written as critical_path.parquet."""
    write_json(directory / RUN_JSON, run.info.replace(schema_version=SCHEMA_VERSION))
    write_json(directory / SUMMARY_JSON, summary)
    write_critical_path(directory, critical_path)
    _write_table(run.kernels, directory / KERNELS)
    _write_table(run.ops, directory / OPS)
    if run.calls is not None:
        _write_table(run.calls, directory / CALLS)
    write_measurements(directory, run.ncu)


def write_measurements(directory: Path, measured: pl.DataFrame | None = None, metrics: pl.DataFrame | None = None,
                       files: dict[str, Path] | None = None) -> None:
    """Nsight Compute's results into `directory` (a staging directory): ncu.parquet (the run's kernels joined with
    the measured launches), ncu_metrics.parquet, and `files` (name → file, moved in) under ncu/."""
    if measured is not None:
        measured.write_parquet(directory / NCU)
    if metrics is not None:
        metrics.write_parquet(directory / NCU_METRICS)
    if files:
        (directory / NCU_DIR).mkdir()
        for name, path in files.items():
            path.replace(directory / NCU_DIR / name)


def write_energy(directory: Path, samples: pl.DataFrame, windows: pl.DataFrame) -> None:
    """profile --energy's samples (power.parquet) and windows with their joules (energy.parquet) into `directory`
    (a staging directory)."""
    _write_table(samples, directory / POWER)
    _write_table(windows, directory / ENERGY)


def write_critical_path(directory: Path, segments: pl.DataFrame | None) -> None:
    """critical_path.parquet into `directory` (a staging directory), where the run has a critical path."""
    if segments is not None:
        _write_table(segments, directory / CRITICAL_PATH)


def read_run_info(directory: Path) -> RunInfo:
    _check_run_directory(directory)
    run_json = directory / RUN_JSON
    data = _read_bytes(run_json)
    raw = decode_plain(str(run_json), data)
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UserError(
            f"{run_json}: schema version {str(version)[:40]!r} is not readable by this kernelscope "
            f"(reads versions up to {SCHEMA_VERSION})"
        )
    return decode_record(str(run_json), data, RunInfo, "run description")


def read_summary(directory: Path) -> Summary:
    file = directory / SUMMARY_JSON
    if not file.is_file():
        raise UserError(f"{directory}: no {SUMMARY_JSON} in the run directory")
    return decode_summary(str(file), _read_bytes(file))


def _read_bytes(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise UserError(f"{file}: cannot read ({exc.strerror or exc})") from None


# Columns without which a kernel table is no kernelscope table (the rest are filled in by contracts.tables).
REQUIRED_KERNEL_COLUMNS = ("name", "kind", "dur_ns")


def read_run(directory: Path, ops: bool = True) -> Run:
    """The run in `directory`, its tables checked against the run format: required columns present, every known
    column of its type, durations not negative; a table that fails is named in one line. ops=False, for commands
    that read only the kernels (reports, what-if, compare): the ops table is read only where the kernels need it
    for their costs (contracts.tables.costs_stored) and is otherwise empty; its file is still checked."""
    info = read_run_info(directory)
    kernels = _read_table(directory / KERNELS)
    ops_table = _read_table(directory / OPS, rows=ops or not costs_stored(kernels))
    ncu = _read_table(directory / NCU) if (directory / NCU).is_file() else None
    calls = _read_table(directory / CALLS) if (directory / CALLS).is_file() else None
    missing = [c for c in REQUIRED_KERNEL_COLUMNS if c not in kernels.columns]
    if missing:
        raise UserError(f"{directory / KERNELS}: not a kernelscope kernel table (no {', '.join(missing)} column)")
    if kernels.height == 0:
        raise UserError(f"{directory / KERNELS}: holds no kernels")
    try:
        run = Run(info=info, kernels=kernels, ops=ops_table, ncu=ncu, calls=calls,
                  energy=read_energy_tables(directory))
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError, pl.exceptions.SchemaError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{directory}: a table's columns do not have the run format's types ({first})") from None
    _check_kernel_values(directory / KERNELS, run.kernels)
    return run


def read_host_ops(directory: Path) -> pl.DataFrame:
    """The outermost CPU ops of a run's ops table (depth 0), only the columns that place them on their thread:
    what the critical path needs of the ops when the run is read without them (read_run(ops=False))."""
    path = directory / OPS
    try:
        columns = set(pl.read_parquet_schema(path))
        if not {"op_id", "name", "cat", "pid", "tid", "start_ns", "dur_ns", "depth"} <= columns:
            return pl.DataFrame()
        wanted = ["op_id", "name", "cat", "pid", "tid", "start_ns", "dur_ns", "depth",
                  *(["rank"] if "rank" in columns else [])]
        return (pl.scan_parquet(path).select(wanted)
                .filter((pl.col("cat") == "cpu_op") & (pl.col("depth") == 0)).collect())
    except Exception as exc:  # polars raises several error types for corrupt files
        raise UserError(f"{path}: unreadable Parquet file ({type(exc).__name__})") from None


# Durations add up over a run: past this (146 years) their sums would overflow the tables' 64-bit integers.
MAX_TOTAL_NS = 2**62


def _check_kernel_values(path: Path, kernels: pl.DataFrame) -> None:
    """Values no kernelscope run holds, refused before any table is built from them."""
    if (kernels["dur_ns"] < 0).any():
        raise UserError(f"{path}: negative kernel durations (not written by kernelscope)")
    if (kernels["dur_ns"].cast(pl.Float64).sum() or 0) > MAX_TOTAL_NS:
        raise UserError(f"{path}: kernel durations add up to more than {MAX_TOTAL_NS:,} ns (not written by "
                        f"kernelscope)")
    floats = [name for name, dtype in kernels.schema.items() if dtype.is_float()]
    bad = kernels.select(pl.col(floats).is_infinite().any() | pl.col(floats).is_nan().any()).row(0) if floats else ()
    for name, flagged in zip(floats, bad, strict=True):
        if flagged:
            raise UserError(f"{path}: column {name} holds values that are not finite numbers (not written by "
                            f"kernelscope)")


def _check_run_directory(directory: Path) -> None:
    if not directory.exists():
        raise UserError(f"{directory}: no such run directory")
    if not directory.is_dir():
        hint = "; a recording is imported first: kernelscope import FILE --out RUN" if directory.is_file() else ""
        raise UserError(f"{directory}: not a directory (expected a kernelscope run directory{hint})")
    if not (directory / RUN_JSON).is_file():
        raise UserError(f"{directory}: not a kernelscope run directory (no {RUN_JSON})")


def _read_table(path: Path, rows: bool = True) -> pl.DataFrame:
    """The table in `path`; rows=False: none of its rows, only its columns, the file checked from its footer."""
    if not path.is_file():
        raise UserError(f"{path}: missing from the run directory")
    try:
        schema = pl.read_parquet_schema(path)
        if not rows:
            return pl.DataFrame(schema=schema)
        _check_size(path, schema)
        table = read_skipping_constants(path)
        return pl.read_parquet(path) if table is None else table
    except UserError:
        raise
    except Exception as exc:  # polars raises several error types for corrupt files
        raise UserError(f"{path}: unreadable Parquet file ({type(exc).__name__})") from None


def _check_size(path: Path, schema: dict) -> None:
    """A few kilobytes of Parquet can declare billions of rows of one value: what the rows would take once read
    (8 bytes a cell, at least) must fit the memory budget."""
    rows = pl.scan_parquet(path).select(pl.len()).collect().item()
    needed, budget = rows * max(len(schema), 1) * 8, memory_budget()
    if needed > budget:
        raise UserError(f"{path}: {rows:,} rows would take more than {needed / 2**30:.1f} GiB, over the memory "
                        f"budget of {budget / 2**30:.1f} GiB (set {MEMORY_BUDGET_ENV} to allow more)")
