"""Read, validate and write run directories (docs/run-format.md): the only module that knows their files.

Every write is staged and swapped in at the end, so a failed or interrupted command leaves nothing
half-written: a new run is built in a hidden sibling directory and renamed into place (`staged_directory`);
changes to an existing run (Nsight Compute results, a re-rendered report) are written into a hidden directory
inside it and moved over the old files only once all of them are written (`updating_run`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from kernelscope.contracts.run import Run
from kernelscope.contracts.run_files import (  # noqa: F401  (read elsewhere as rundir.TRACE, …)
    KERNELS,
    NCU,
    NCU_DIR,
    NCU_METRICS,
    OPS,
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
from kernelscope.load.constant_columns import footer_metadata, read_skipping_constants
from kernelscope.workers import mark_output_in_place, signals_held


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


def umask() -> int:
    """The process's file-creation mask (reading it means setting it: put it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def private_temp_directory(prefix: str, parent: Path) -> Path:
    """A fresh hidden directory in `parent` for staging; mkdtemp makes it 0700, so give it the mode any other
    directory made here would have (the umask's), or teammates could not read the run it becomes."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def claim_parent(final: Path) -> None:
    """Create the folders above `final`; a file where a folder should be is the user's to fix."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{final.parent}: not a directory") from None
    except OSError as exc:
        raise UserError(f"{final.parent}: cannot create the directory ({exc.strerror or exc})") from None
    if not final.parent.is_dir():
        raise UserError(f"{final.parent}: not a directory")


@contextmanager
def staged_directory(final: Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to `final`; rename it to `final` if the block succeeds.

    Without `replace`, `final` is claimed first by creating it (atomic: of two commands writing to one --out,
    the second is refused at once instead of one result silently replacing the other); the finished run is
    then renamed over the empty claimed directory. On failure the claim is taken back."""
    final = final.resolve()
    claim_parent(final)
    claimed = False
    tmp: Path | None = None
    try:
        with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
            if not replace:
                try:
                    os.mkdir(final)
                    claimed = True
                except FileExistsError:
                    raise UserError(f"{final}: already exists (choose another --out or remove it)") from None
                except OSError as exc:
                    raise UserError(f"{final}: cannot create ({exc.strerror or exc})") from None
            try:
                tmp = private_temp_directory(f".{final.name}.partial-", final.parent)
            except OSError as exc:
                raise UserError(f"{final.parent}: cannot write here ({exc.strerror or exc})") from None
        yield tmp
        with signals_held():  # the output is renamed into place whole; a signal waits for that
            if final.exists() and not claimed:
                old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
                os.replace(final, old / final.name)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, final)  # over the empty directory that claimed the name
            mark_output_in_place()
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if claimed:
            with contextlib.suppress(OSError):
                os.rmdir(final)  # only if still our empty claim
        raise


@contextmanager
def updating_run(run_dir: Path) -> Iterator[Path]:
    """Yield a hidden staging directory inside `run_dir`: whatever the block writes there (files, or whole
    directories such as report/) replaces the run's entries of the same names once the block succeeds; run.json
    goes last. On failure, in the block or while swapping, the run is left as it was. One command at a time
    updates a run: the directory itself is locked (flock, released by the system even if the process dies)."""
    with _locked(run_dir):
        staging: Path | None = None
        try:
            with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
                try:
                    staging = private_temp_directory(".update.partial-", run_dir)
                except OSError as exc:
                    raise UserError(f"{run_dir}: cannot write into the run ({exc.strerror or exc})") from None
            yield staging
            entries = sorted(staging.iterdir(), key=lambda p: p.name == RUN_JSON)
            with signals_held():  # the swap is short: a signal waits until the run is whole again
                _swap_all(entries, run_dir, staging.with_name(staging.name.replace(".partial-", ".old-")))
                mark_output_in_place()
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
                shutil.rmtree(staging.with_name(staging.name.replace(".partial-", ".old-")), ignore_errors=True)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    try:
        fd = os.open(run_dir, os.O_RDONLY)
    except OSError as exc:
        raise UserError(f"{run_dir}: cannot open the run ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{run_dir}: another kernelscope command is updating this run; try again when it "
                            f"has finished") from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _swap_all(entries: list[Path], run_dir: Path, aside: Path) -> None:
    """Move each staged entry over the run's entry of the same name, the old ones first set aside; if any move
    fails, every entry already swapped is put back."""
    aside.mkdir()
    done: list[tuple[Path, Path | None]] = []
    try:
        for entry in entries:
            old = run_dir / entry.name
            kept = None
            if old.exists():
                kept = aside / entry.name
                os.replace(old, kept)
            done.append((old, kept))
            os.replace(entry, old)
    except BaseException:
        for old, kept in reversed(done):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
            if kept is not None:
                os.replace(kept, old)
        raise


@contextmanager
def new_file(target: Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `target` to write; once the block succeeds it becomes `target`. Unless
    `replace`, `target` must not exist (a hard link claims the name atomically: an existing file is never
    overwritten). Its mode follows the umask."""
    target = target.resolve()
    claim_parent(target)
    if target.exists() and not replace:
        raise UserError(f"{target}: already exists (choose another --out or remove it)")
    tmp: Path | None = None
    try:
        with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.partial-", dir=target.parent)
            os.close(fd)
            tmp = Path(name)
        os.chmod(tmp, 0o666 & ~umask())
        yield tmp
        with signals_held():  # the file is put in place whole; a signal waits for that, then no longer counts
            if replace:
                os.replace(tmp, target)
            else:
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    raise UserError(f"{target}: already exists (written by another command meanwhile)") from None
            mark_output_in_place()
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def write_json(path: Path, data: Any) -> None:
    if isinstance(data, msgspec.Struct):
        data = msgspec.to_builtins(data)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _write_table(table: pl.DataFrame, path: Path) -> None:
    """One row group: Polars reads each row group as a chunk of its own, and a table in several chunks is copied
    into one when a run is read (contracts.tables.conform): at 1.5 M kernels 0.2 s and 0.9 GB more for every
    report, against 0.13 s more for this write (measured 2026-11-27)."""
    table.write_parquet(path, compression="zstd", row_group_size=max(table.height, 1),
                        metadata=footer_metadata(table) or None)


def write_run(directory: Path, run: Run, summary: Summary) -> None:
    """run.json, summary.json and the tables of `run` into `directory` (a staging directory)."""
    write_json(directory / RUN_JSON, run.info.replace(schema_version=SCHEMA_VERSION))
    write_json(directory / SUMMARY_JSON, summary)
    _write_table(run.kernels, directory / KERNELS)
    _write_table(run.ops, directory / OPS)
    if run.ncu is not None:
        run.ncu.write_parquet(directory / NCU)


def read_run_info(directory: Path) -> RunInfo:
    _check_run_directory(directory)
    run_json = directory / RUN_JSON
    try:
        data = run_json.read_bytes()
        raw = msgspec.json.decode(data)
    except (OSError, msgspec.DecodeError) as exc:
        raise UserError(f"{run_json}: invalid JSON ({exc})") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UserError(
            f"{run_json}: schema version {version!r} is not readable by this kernelscope "
            f"(reads versions up to {SCHEMA_VERSION})"
        )
    try:
        return RunInfo.from_json(data)
    except msgspec.ValidationError as exc:
        raise UserError(f"{run_json}: not a kernelscope run description: {exc}") from None


def read_summary(directory: Path) -> Summary:
    file = directory / SUMMARY_JSON
    if not file.is_file():
        raise UserError(f"{directory}: no {SUMMARY_JSON} in the run directory")
    try:
        return Summary.from_json(file.read_bytes())
    except msgspec.ValidationError as exc:
        raise UserError(f"{file}: not a kernelscope summary: {exc}") from None
    except (OSError, msgspec.DecodeError) as exc:
        raise UserError(f"{file}: invalid JSON ({exc})") from None


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
    missing = [c for c in REQUIRED_KERNEL_COLUMNS if c not in kernels.columns]
    if missing:
        raise UserError(f"{directory / KERNELS}: not a kernelscope kernel table (no {', '.join(missing)} column)")
    if kernels.height == 0:
        raise UserError(f"{directory / KERNELS}: holds no kernels")
    try:
        run = Run(info=info, kernels=kernels, ops=ops_table, ncu=ncu)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError, pl.exceptions.SchemaError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{directory}: a table's columns do not have the run format's types ({first})") from None
    if (run.kernels["dur_ns"] < 0).any():
        raise UserError(f"{directory / KERNELS}: negative kernel durations (not written by kernelscope)")
    return run


def _check_run_directory(directory: Path) -> None:
    if not directory.exists():
        raise UserError(f"{directory}: no such run directory")
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory (expected a kernelscope run directory)")
    if not (directory / RUN_JSON).is_file():
        raise UserError(f"{directory}: not a kernelscope run directory (no {RUN_JSON})")


def _read_table(path: Path, rows: bool = True) -> pl.DataFrame:
    """The table in `path`; rows=False: none of its rows, only its columns, the file checked from its footer."""
    if not path.is_file():
        raise UserError(f"{path}: missing from the run directory")
    try:
        if not rows:
            return pl.DataFrame(schema=pl.read_parquet_schema(path))
        table = read_skipping_constants(path)
        return pl.read_parquet(path) if table is None else table
    except Exception as exc:  # polars raises several error types for corrupt files
        raise UserError(f"{path}: unreadable Parquet file ({type(exc).__name__})") from None
