"""Where run directories are: a run directory, a folder of runs (searched below it), a glob of either, or a remote
location DuckDB can read (`s3://…`, `https://…`, `hf://…`: listed and read through DuckDB's file systems). A remote
run is read here through the typed contracts (run.json as RunInfo, summary.json as Summary); local runs are read
by run_catalog.py, which keeps what it read in the dataset cache."""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope.contracts.run_files import CRITICAL_PATH, KERNELS, NCU, OPS, RUN_JSON, SUMMARY_JSON
from kernelscope.errors import UserError

if TYPE_CHECKING:
    import duckdb

    from kernelscope.contracts.run_info import RunInfo
    from kernelscope.contracts.summary import Summary

GLOB_CHARACTERS = frozenset("*?[")
TABLES = (KERNELS, OPS, NCU, CRITICAL_PATH)


@dataclass(frozen=True)
class RemoteRun:
    """What a remote run's run.json and summary.json say, and which of TABLES it holds (read through DuckDB)."""

    info: RunInfo
    summary: Summary | None
    tables: frozenset[str]


@dataclass(frozen=True)
class Located:
    """A run found: its directory (an absolute path, or a URL), and for a remote run what was read of it."""

    directory: str
    remote: RemoteRun | None = None


def is_remote(location: str) -> bool:
    return "://" in location


def locate(locations: list[str], con: duckdb.DuckDBPyConnection | None = None) -> list[Located]:
    """Every run under `locations`, in the order given (runs of one location sorted by path), each once."""
    if not locations:
        raise UserError("no run locations given (a run directory, a folder of runs, or a glob)")
    found: list[Located] = []
    seen: set[str] = set()
    for location in locations:
        if is_remote(location):
            runs = _remote_runs(location, _connection(con))
        else:
            runs = [Located(str(d)) for d in _local_run_dirs(location)]
        for run in runs:
            if run.directory not in seen:
                seen.add(run.directory)
                found.append(run)
    return found


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def _local_run_dirs(location: str) -> list[Path]:
    matches = sorted(glob.glob(location)) if GLOB_CHARACTERS & set(location) else [location]
    if not matches:
        raise UserError(f"{location}: matches no files or directories")
    dirs: list[Path] = []
    for match in matches:
        path = Path(match)
        if path.is_file() and path.name == RUN_JSON:
            path = path.parent
        if not path.exists():
            raise UserError(f"{path}: no such run directory or folder of runs")
        if not path.is_dir():
            raise UserError(f"{path}: not a directory (expected a run directory or a folder of runs)")
        if (path / RUN_JSON).is_file():
            dirs.append(path.resolve())
            continue
        below = _runs_below(path)
        if not below and len(matches) == 1:
            raise UserError(f"{path}: no kernelscope run directories (no {RUN_JSON}) in this folder")
        dirs += below
    return dirs


def _runs_below(folder: Path) -> list[Path]:
    """Run directories under `folder` (not inside one another; hidden directories, e.g. staging ones, skipped).
    Links to folders are followed (a folder of runs may link to runs kept elsewhere), each folder visited once:
    a link back up the tree, or two links to one folder, cannot make the walk go round forever. A sub-folder holding
    a run.json (anything but a folder by that name) is a run and is not listed: one stat tells it."""
    runs = []
    seen: set[tuple[int, int]] = set()
    pending = [str(folder)]
    while pending:
        directory = pending.pop()
        try:
            identity = os.stat(directory)
            if (identity.st_dev, identity.st_ino) in seen:
                continue
            seen.add((identity.st_dev, identity.st_ino))
            with os.scandir(directory) as entries:
                subdirs = [e.path for e in entries if not e.name.startswith(".") and _is_dir(e)]
        except OSError:
            continue
        for sub in subdirs:
            if _holds_run_json(sub):
                runs.append(Path(sub).resolve())
            else:
                pending.append(sub)
    return sorted(set(runs))


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # a link to a folder counts
    except OSError:
        return False


def _holds_run_json(directory: str) -> bool:
    """Whether `directory` has an entry run.json that is not a folder (a broken link counts: reading it says
    what is wrong)."""
    path = os.path.join(directory, RUN_JSON)
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return os.path.lexists(path)


def run_ids(directories: list[str]) -> list[str]:
    """The directory names, or paths below the runs' common folder where two runs share a name."""
    names = [d.rstrip("/").rsplit("/", 1)[-1] for d in directories]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath(directories) if not any(map(is_remote, directories)) else ""
    return [os.path.relpath(d, common) if common else d for d in directories]


def _connection(con: duckdb.DuckDBPyConnection | None) -> duckdb.DuckDBPyConnection:
    import duckdb

    return con if con is not None else duckdb.connect()


def _remote_runs(location: str, con: duckdb.DuckDBPyConnection) -> list[Located]:
    """Runs at a remote location (the location itself, or its sub-folders), through DuckDB's file systems, each
    read whole here (they are not cached)."""
    import duckdb

    from kernelscope.load.run_records import decode_summary

    base = location.rstrip("/")
    pattern = base if base.endswith(f"/{RUN_JSON}") else None
    patterns = [pattern] if pattern else [f"{base}/{RUN_JSON}", f"{base}/*/{RUN_JSON}"]
    try:
        files = sorted({row[0] for p in patterns for row in con.execute("select file from glob(?)", [p]).fetchall()})
        if not files:
            raise UserError(f"{location}: no kernelscope run directories (no {RUN_JSON}) here")
        runs = []
        for file in files:
            directory = file[: -len(RUN_JSON) - 1]
            info = _decode_run_info(file, _read_text(con, file))
            summary_text = _read_text(con, join(directory, SUMMARY_JSON), missing_ok=True)
            summary_file = join(directory, SUMMARY_JSON)
            summary = decode_summary(summary_file, summary_text) if summary_text is not None else None
            tables = frozenset(name for name in TABLES
                               if con.execute("select file from glob(?)", [join(directory, name)]).fetchall())
            runs.append(Located(directory, RemoteRun(info, summary, tables)))
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
    from kernelscope.contracts.run_info import SCHEMA_VERSION, RunInfo
    from kernelscope.load.run_records import decode_record

    info = decode_record(file, text or "", RunInfo, "run description")
    if info.schema_version > SCHEMA_VERSION:
        raise UserError(f"{file}: schema version {info.schema_version} is not readable by this kernelscope "
                        f"(reads versions up to {SCHEMA_VERSION})")
    return info


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
