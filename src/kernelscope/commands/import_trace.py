"""`kernelscope import FILE…`: make a run directory from Kineto traces written by any program."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kernelscope.analyze.attribution import attribute
from kernelscope.capture.environment import describe_software
from kernelscope.commands.finish import write_run_directory
from kernelscope.load import rundir
from kernelscope.load.kineto import load_kineto
from kernelscope.load.profile import Profile


def import_traces(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                  languages: tuple[str, ...] = ("en", "zh")) -> Path:
    kernels_parts, ops_parts, metas = [], [], []
    for rank, path in enumerate(files):
        tables = load_kineto(path)
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
