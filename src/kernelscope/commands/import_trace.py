"""`kernelscope import FILE…`: make a run directory from traces written by any program: Kineto / torch.profiler
JSON, Nsight Systems SQLite exports, or .nsys-rep reports (exported through `nsys export` when nsys is here)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kernelscope.analyze.attribution import attribute
from kernelscope.capture.environment import describe_software
from kernelscope.commands.finish import write_run_directory
from kernelscope.load import rundir
from kernelscope.load.kineto import TraceTables, load_kineto
from kernelscope.load.nsys_sqlite import export_nsys_rep, is_nsys_sqlite, load_nsys_sqlite
from kernelscope.load.profile import Profile


def import_traces(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                  languages: tuple[str, ...] = ("en", "zh")) -> Path:
    kernels_parts, ops_parts, metas = [], [], []
    for rank, path in enumerate(files):
        tables = load_trace(path)
        kernels, ops = attribute(tables)
        kernels_parts.append(kernels.with_columns(pl.lit(rank, dtype=pl.Int64).alias("rank")))
        ops_parts.append(ops.with_columns(pl.lit(rank, dtype=pl.Int64).alias("rank")))
        metas.append(dict(tables.meta, file=str(path), json_bytes=None))
    kernels = pl.concat(kernels_parts, how="diagonal_relaxed")
    ops = pl.concat(ops_parts, how="diagonal_relaxed")
    first = metas[0]
    props = (first.get("device_properties") or [{}])[0] if first.get("device_properties") else {}
    device_type = "cuda" if kernels.height and kernels["kind"].first() != "cpu_op" else "cpu"
    hardware = _hardware_from_trace(props, device_type)
    run = {
        "source": "import",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": [str(p) for p in files],
        "hardware": hardware,
        "software": {"kernelscope": describe_software()["kernelscope"]},
        "trace": {
            "format": first.get("source_format", "kineto"),
            "event_count": sum(m["event_count"] for m in metas),
            "files": metas,
            "cuda_runtime_version": first.get("cuda_runtime_version"),
            "cuda_driver_version": first.get("cuda_driver_version"),
        },
    }
    profile = Profile(kernels=kernels, ops=ops, run=run)
    target = out or rundir.default_run_path(runs_dir, files[0].name.split(".")[0], hardware.get("name") or device_type)
    with rundir.staged_directory(target) as tmp:
        write_run_directory(tmp, profile, report=report, languages=languages)
    return target.resolve()


def load_trace(path: Path) -> TraceTables:
    """A trace file of any supported recorder, by its content (and the .nsys-rep suffix)."""
    if path.suffix == ".nsys-rep":
        with tempfile.TemporaryDirectory(prefix="kernelscope-nsys-") as workdir:
            return load_nsys_sqlite(export_nsys_rep(path, Path(workdir)))
    if is_nsys_sqlite(path) or _sqlite_header(path):
        return load_nsys_sqlite(path)  # any SQLite file: the nsys loader says what a foreign one lacks
    return load_kineto(path)


def _sqlite_header(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _hardware_from_trace(props: dict, device_type: str) -> dict:
    if not props:
        return {"device_type": device_type, "name": None}
    return {
        "device_type": device_type,
        "name": props.get("name"),
        "memory_bytes": props.get("totalGlobalMem"),
        "sm_count": props.get("numSms"),
        "compute_capability": (
            f"{props['computeMajor']}.{props['computeMinor']}" if "computeMajor" in props else None
        ),
        "l2_cache_bytes": props.get("l2CacheSize"),
    }
