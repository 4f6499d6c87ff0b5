"""Read, validate and write run directories (docs/run-format.md): the only module that knows their files.

Every write is staged and swapped in at the end, so a failed or interrupted command leaves nothing
half-written: a new run is built in a hidden sibling directory and renamed into place (`staged_directory`);
changes to an existing run (Nsight Compute results, a re-rendered report) are written into a hidden directory
inside it and moved over the old files only once all of them are written (`updating_run`).
"""

from __future__ import annotations

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
from kernelscope.contracts.run_info import SCHEMA_VERSION, RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.errors import UserError

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
KERNELS = "kernels.parquet"
OPS = "ops.parquet"
TRACE = "trace.json.gz"
NCU = "ncu.parquet"
NCU_METRICS = "ncu_metrics.parquet"
NCU_DIR = "ncu"
REPORT_DIR = "report"


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


@contextmanager
def staged_directory(final: Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to `final`; rename it to `final` if the block succeeds."""
    final = final.resolve()
    if final.exists() and not replace:
        raise UserError(f"{final}: already exists (choose another --out or remove it)")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / final.name)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def updating_run(run_dir: Path) -> Iterator[Path]:
    """Yield a hidden staging directory inside `run_dir`: whatever the block writes there (files, or whole
    directories such as report/) replaces the run's entries of the same names once the block succeeds; run.json
    goes last. On failure the run is left as it was."""
    staging = Path(tempfile.mkdtemp(prefix=".update.partial-", dir=run_dir))
    try:
        yield staging
        entries = sorted(staging.iterdir(), key=lambda p: p.name == RUN_JSON)
        for entry in entries:
            _swap_in(entry, run_dir / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap_in(new: Path, old: Path) -> None:
    if new.is_dir() and old.exists():
        aside = old.with_name(f".{old.name}.old-{os.getpid()}")
        os.replace(old, aside)
        os.replace(new, old)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(new, old)


def write_json(path: Path, data: Any) -> None:
    if isinstance(data, msgspec.Struct):
        data = msgspec.to_builtins(data)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def write_run(directory: Path, run: Run, summary: Summary) -> None:
    """run.json, summary.json and the tables of `run` into `directory` (a staging directory)."""
    write_json(directory / RUN_JSON, run.info.replace(schema_version=SCHEMA_VERSION))
    write_json(directory / SUMMARY_JSON, summary)
    run.kernels.write_parquet(directory / KERNELS, compression="zstd")
    run.ops.write_parquet(directory / OPS, compression="zstd")
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


def read_run(directory: Path) -> Run:
    info = read_run_info(directory)
    kernels = _read_table(directory / KERNELS)
    ops = _read_table(directory / OPS)
    ncu = _read_table(directory / NCU) if (directory / NCU).is_file() else None
    return Run(info=info, kernels=kernels, ops=ops, ncu=ncu)


def _check_run_directory(directory: Path) -> None:
    if not directory.exists():
        raise UserError(f"{directory}: no such run directory")
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory (expected a kernelscope run directory)")
    if not (directory / RUN_JSON).is_file():
        raise UserError(f"{directory}: not a kernelscope run directory (no {RUN_JSON})")


def _read_table(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise UserError(f"{path}: missing from the run directory")
    try:
        return pl.read_parquet(path)
    except Exception as exc:  # polars raises several error types for corrupt files
        raise UserError(f"{path}: unreadable Parquet file ({type(exc).__name__})") from None
