"""`kernelscope import` of Nsight Compute exports made elsewhere: a CSV (raw or details page), a directory with
one sub-directory per kernel holding ncu.details.csv, or a .ncu-rep (exported through the ncu CLI). Either a
run of its own, or added to an existing run with --into RUN (matched to the run's kernels)."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kernelscope.analyze.measured import join_measurements
from kernelscope.capture import nsight_compute as nc
from kernelscope.capture.environment import describe_software
from kernelscope.commands.finish import write_run_directory
from kernelscope.commands.report import rerender
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.ncu import NcuTables, read_ncu_csv, read_ncu_directory
from kernelscope.load.profile import Profile


def is_ncu_input(path: Path) -> bool:
    if path.is_dir() or path.suffix == ".ncu-rep":
        return True
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    with path.open("r", encoding="utf-8", errors="replace") as f:
        head = f.read(65536)
    return '"ID"' in head and "Kernel Name" in head


def read_ncu_input(path: Path) -> NcuTables:
    if path.is_dir():
        return read_ncu_directory(path)
    if path.suffix == ".ncu-rep":
        ncu = nc.find_ncu()
        with tempfile.TemporaryDirectory() as tmp:
            return read_ncu_csv(nc.export_csv(ncu, path, "raw", Path(tmp) / "raw.csv"))
    return read_ncu_csv(path)


def _concat(paths: list[Path]) -> NcuTables:
    parts = [read_ncu_input(p) for p in paths]
    offset, launches, metrics = 0, [], []
    for part in parts:
        shift = offset - int(part.launches["launch"].min())
        launches.append(part.launches.with_columns(pl.col("launch") + shift))
        metrics.append(part.metrics.with_columns(pl.col("launch") + shift))
        offset += int(part.launches["launch"].max()) + shift + 1 - offset
    return NcuTables(pl.concat(launches, how="diagonal_relaxed"), pl.concat(metrics, how="vertical_relaxed"))


def import_ncu(paths: list[Path], out: Path | None, runs_dir: Path, into: Path | None, phase: str,
               report: bool = True, languages: tuple[str, ...] = ("en", "zh")) -> Path:
    tables = _concat(paths)
    if into is not None:
        return _add_to_run(into, tables, paths, phase)
    launches = tables.launches.sort("launch")
    durations = (launches["duration_us"].fill_null(0) * 1e3).round().cast(pl.Int64)
    kernels = launches.select(
        pl.col("kernel_name").alias("name"), pl.lit("kernel").alias("kind"), "device", "stream",
        (durations.cum_sum() - durations).alias("start_ns"), durations.alias("dur_ns"),
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    ).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("op_id"), pl.lit(None, dtype=pl.String).alias("op"),
        pl.lit(None, dtype=pl.String).alias("top_op"), pl.lit("unknown").alias("phase"),
        pl.lit(None, dtype=pl.Int64).alias("step"), pl.lit(None, dtype=pl.String).alias("module"),
        pl.lit(None, dtype=pl.Int64).alias("layer"), pl.lit(None, dtype=pl.Float64).alias("est_occupancy_pct"),
        pl.lit(None, dtype=pl.Int64).alias("registers_per_thread"), pl.lit(None, dtype=pl.Int64).alias("bytes"),
        pl.lit(None, dtype=pl.Int64).alias("correlation"),
    ).with_row_index("kernel_id").with_columns(pl.col("kernel_id").cast(pl.Int64))
    measured = launches.with_columns(
        pl.col("kernel_name").alias("name"), pl.lit("unknown").alias("phase"),
        kernels["kernel_id"].alias("kernel_id"), pl.lit(True).alias("top_kernel"),
    )
    ops = pl.DataFrame(schema={"op_id": pl.Int64, "name": pl.String, "cat": pl.String, "parent_op_id": pl.Int64,
                               "input_dims": pl.String, "input_types": pl.String, "concrete_inputs": pl.String})
    run = {
        "source": "import",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": [str(p) for p in paths],
        "hardware": {"device_type": "cuda", "name": None},
        "software": {"kernelscope": describe_software()["kernelscope"]},
        "trace": {"event_count": 0},
        "ncu": {"phase": "unknown", "imported_from": [str(p) for p in paths], "profiled_launches": launches.height,
                "launches_per_config": None, "sections": sorted(set(tables.metrics["section"]) - {""})},
    }
    profile = Profile(kernels=kernels, ops=ops, run=run, ncu=measured)
    target = out or rundir.default_run_path(runs_dir, paths[0].stem, "ncu")
    with rundir.staged_directory(target) as tmp:
        measured.write_parquet(tmp / rundir.NCU)
        tables.metrics.write_parquet(tmp / rundir.NCU_METRICS)
        write_run_directory(tmp, profile, report=report, languages=languages)
    return target.resolve()


def _add_to_run(run_path: Path, tables: NcuTables, paths: list[Path], phase: str) -> Path:
    profile = rundir.read_run(run_path)
    joined = join_measurements(profile.kernels, tables.launches, phase).with_columns(
        pl.col("name").is_not_null().alias("top_kernel"))
    if not joined["name"].is_not_null().any():
        raise UserError(f"{paths[0]}: none of its kernels matches a kernel of {run_path} in phase '{phase}'")
    staging = Path(tempfile.mkdtemp(prefix=".ncu-import.partial-", dir=run_path))
    try:
        joined.write_parquet(staging / rundir.NCU)
        tables.metrics.write_parquet(staging / rundir.NCU_METRICS)
        run = json.loads((run_path / rundir.RUN_JSON).read_text(encoding="utf-8"))
        run["ncu"] = {"phase": phase, "imported_from": [str(p) for p in paths],
                      "profiled_launches": tables.launches.height,
                      "matched_launches": int(joined["name"].is_not_null().sum()), "launches_per_config": None,
                      "sections": sorted(set(tables.metrics["section"]) - {""})}
        for name in (rundir.NCU, rundir.NCU_METRICS):
            shutil.move(staging / name, run_path / name)
        rundir.write_json(run_path / rundir.RUN_JSON, run)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    rerender(run_path, 20)
    return run_path.resolve()
