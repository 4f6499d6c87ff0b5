"""Read and write run directories (docs/run-format.md). Writes are staged in a hidden sibling
directory and renamed into place at the end, so a failed command leaves nothing half-written."""

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

import polars as pl

from kernelscope.errors import UserError
from kernelscope.load.profile import Profile, with_instances

SCHEMA_VERSION = 1

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
KERNELS = "kernels.parquet"
OPS = "ops.parquet"
TRACE = "trace.json.gz"
NCU = "ncu.parquet"
NCU_METRICS = "ncu_metrics.parquet"
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


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def write_run(directory: Path, profile: Profile, summary: dict[str, Any]) -> None:
    run = dict(profile.run, schema_version=SCHEMA_VERSION)
    write_json(directory / RUN_JSON, run)
    write_json(directory / SUMMARY_JSON, summary)
    with_instances(profile.kernels).write_parquet(directory / KERNELS, compression="zstd")
    profile.ops.write_parquet(directory / OPS, compression="zstd")


def read_run_json(directory: Path) -> dict[str, Any]:
    return read_run(directory, tables=False).run


def read_run(directory: Path, tables: bool = True) -> Profile:
    if not directory.exists():
        raise UserError(f"{directory}: no such run directory")
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory (expected a kernelscope run directory)")
    run_json = directory / RUN_JSON
    if not run_json.is_file():
        raise UserError(f"{directory}: not a kernelscope run directory (no {RUN_JSON})")
    try:
        run = json.loads(run_json.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{run_json}: invalid JSON ({exc})") from None
    version = run.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UserError(
            f"{run_json}: schema version {version!r} is not readable by this kernelscope "
            f"(reads versions up to {SCHEMA_VERSION})"
        )
    if not tables:
        return Profile(kernels=pl.DataFrame(), ops=pl.DataFrame(), run=run)
    kernels = with_instances(_read_table(directory / KERNELS))
    profile = Profile(kernels=kernels, ops=_read_table(directory / OPS), run=run)
    if (directory / NCU).is_file():
        profile.ncu = _read_table(directory / NCU)
    return profile


def _read_table(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise UserError(f"{path}: missing from the run directory")
    try:
        return pl.read_parquet(path)
    except Exception as exc:  # polars raises several error types for corrupt files
        raise UserError(f"{path}: unreadable Parquet file ({type(exc).__name__})") from None
