"""Where run directories are: a run directory, a folder of runs (searched below it), a glob of either, or a remote
location DuckDB can read (`s3://…`, `https://…`, `hf://…`: listed and read through DuckDB's file systems). Each run
found is read through the typed contracts (run.json as RunInfo, summary.json as Summary), so a broken run is named
in one line before any query runs."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope.contracts.run_info import SCHEMA_VERSION, RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.run_records import decode_record, decode_summary

if TYPE_CHECKING:
    import duckdb

GLOB_CHARACTERS = frozenset("*?[")
TABLES = (rundir.KERNELS, rundir.OPS, rundir.NCU, rundir.CRITICAL_PATH)


@dataclass(frozen=True)
class RunFiles:
    """One run of a dataset: its id (unique in the dataset), where it is, what run.json and summary.json say,
    and its table files (absolute paths or URLs, as DuckDB reads them; None where the run does not hold the table:
    records kept without their tables, such as benchmark results, still have run.json and summary.json)."""

    run_id: str
    directory: str
    info: RunInfo
    summary: Summary | None
    kernels: str | None
    ops: str | None
    ncu: str | None
    critical_path: str | None = None


def is_remote(location: str) -> bool:
    return "://" in location


def find_runs(locations: list[str], con: duckdb.DuckDBPyConnection | None = None) -> list[RunFiles]:
    """Every run under `locations`, in the order given (runs of one location sorted by path), each once."""
    if not locations:
        raise UserError("no run locations given (a run directory, a folder of runs, or a glob)")
    found: list[tuple[str, RunInfo, Summary | None, set[str]]] = []
    seen: set[str] = set()
    for location in locations:
        if is_remote(location):
            runs = _remote_runs(location, _connection(con))
        else:
            runs = [(str(d), rundir.read_run_info(d), _local_summary(d), _local_tables(d))
                    for d in _local_run_dirs(location)]
        for run in runs:
            if run[0] not in seen:
                seen.add(run[0])
                found.append(run)
    ids = _run_ids([directory for directory, *_ in found])
    out = []
    for run_id, (directory, info, summary, tables) in zip(ids, found, strict=True):
        files = {name: _join(directory, name) if name in tables else None for name in TABLES}
        out.append(RunFiles(run_id=run_id, directory=directory, info=info, summary=summary,
                            kernels=files[rundir.KERNELS], ops=files[rundir.OPS], ncu=files[rundir.NCU],
                            critical_path=files[rundir.CRITICAL_PATH]))
    return out


def _local_tables(directory: Path) -> set[str]:
    return {name for name in TABLES if (directory / name).is_file()}


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def _local_run_dirs(location: str) -> list[Path]:
    matches = sorted(glob.glob(location)) if GLOB_CHARACTERS & set(location) else [location]
    if not matches:
        raise UserError(f"{location}: matches no files or directories")
    dirs: list[Path] = []
    for match in matches:
        path = Path(match)
        if path.is_file() and path.name == rundir.RUN_JSON:
            path = path.parent
        if not path.exists():
            raise UserError(f"{path}: no such run directory or folder of runs")
        if not path.is_dir():
            raise UserError(f"{path}: not a directory (expected a run directory or a folder of runs)")
        if (path / rundir.RUN_JSON).is_file():
            dirs.append(path.resolve())
            continue
        below = _runs_below(path)
        if not below and len(matches) == 1:
            raise UserError(f"{path}: no kernelscope run directories (no {rundir.RUN_JSON}) in this folder")
        dirs += below
    return dirs


def _runs_below(folder: Path) -> list[Path]:
    """Run directories under `folder` (not inside one another; hidden directories, e.g. staging ones, skipped).
    Links to folders are followed (a folder of runs may link to runs kept elsewhere), each folder visited once:
    a link back up the tree, or two links to one folder, cannot make the walk go round forever."""
    runs = []
    seen: set[tuple[int, int]] = set()
    for root, subdirs, files in os.walk(folder, followlinks=True):
        try:
            identity = os.stat(root)
        except OSError:
            subdirs.clear()
            continue
        if (identity.st_dev, identity.st_ino) in seen:
            subdirs.clear()
            continue
        seen.add((identity.st_dev, identity.st_ino))
        if rundir.RUN_JSON in files and Path(root) != folder:
            runs.append(Path(root).resolve())
            subdirs.clear()
            continue
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return sorted(set(runs))


def _local_summary(directory: Path) -> Summary | None:
    return rundir.read_summary(directory) if (directory / rundir.SUMMARY_JSON).is_file() else None


def _run_ids(directories: list[str]) -> list[str]:
    """The directory names, or paths below the runs' common folder where two runs share a name."""
    names = [d.rstrip("/").rsplit("/", 1)[-1] for d in directories]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath(directories) if not any(map(is_remote, directories)) else ""
    return [os.path.relpath(d, common) if common else d for d in directories]


def _connection(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
    import duckdb

    return con if con is not None else duckdb.connect()


def _remote_runs(location: str,
                 con: duckdb.DuckDBPyConnection) -> list[tuple[str, RunInfo, Summary | None, set[str]]]:
    """Runs at a remote location (the location itself, or its sub-folders), through DuckDB's file systems."""
    import duckdb

    base = location.rstrip("/")
    pattern = base if base.endswith(f"/{rundir.RUN_JSON}") else None
    patterns = [pattern] if pattern else [f"{base}/{rundir.RUN_JSON}", f"{base}/*/{rundir.RUN_JSON}"]
    try:
        files = sorted({row[0] for p in patterns for row in con.execute("select file from glob(?)", [p]).fetchall()})
        if not files:
            raise UserError(f"{location}: no kernelscope run directories (no {rundir.RUN_JSON}) here")
        runs = []
        for file in files:
            directory = file[: -len(rundir.RUN_JSON) - 1]
            info = _decode_run_info(file, _read_text(con, file))
            summary_text = _read_text(con, _join(directory, rundir.SUMMARY_JSON), missing_ok=True)
            summary_file = _join(directory, rundir.SUMMARY_JSON)
            summary = decode_summary(summary_file, summary_text) if summary_text is not None else None
            tables = {name for name in TABLES
                      if con.execute("select file from glob(?)", [_join(directory, name)]).fetchall()}
            runs.append((directory, info, summary, tables))
        return runs
    except duckdb.Error as exc:
        raise UserError(f"{location}: cannot read ({_first_line(exc)})") from None


def _read_text(con: duckdb.DuckDBPyConnection, file: str, missing_ok: bool = False) -> str | None:
    import duckdb

    try:
        row = con.execute("select content from read_text(?)", [file]).fetchone()
    except duckdb.IOException:
        if missing_ok:
            return None
        raise
    return row[0] if row else None


def _decode_run_info(file: str, text: str | None) -> RunInfo:
    info = decode_record(file, text or "", RunInfo, "run description")
    if info.schema_version > SCHEMA_VERSION:
        raise UserError(f"{file}: schema version {info.schema_version} is not readable by this kernelscope "
                        f"(reads versions up to {SCHEMA_VERSION})")
    return info


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
