"""`kernelscope import` of Nsight Compute exports made elsewhere: a CSV (raw or details page), a directory with
one sub-directory per kernel holding ncu.details.csv, or a .ncu-rep (exported through the ncu CLI). Either a
run of its own, or added to an existing run with --into RUN (matched to the run's kernels)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from kernelscope.analyze.costs.ncu_measurements import join_measurements
from kernelscope.capture import nsight_compute as nc
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import Hardware
from kernelscope.contracts.trace_records import NcuInfo, TraceInfo
from kernelscope.errors import UserError
from kernelscope.load import rundir, staging
from kernelscope.load.ncu import NcuTables, read_ncu_csv, read_ncu_directory
from kernelscope.load.sources import imported_run_info
from kernelscope.pipeline import add_measurements, write_run_directory


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
               report: bool = True, languages: tuple[str, ...] = ("en", "zh"), device_spec: str | None = None) -> Path:
    tables = _concat(paths)
    if into is not None:
        return _add_to_run(into, tables, paths, phase)
    launches = tables.launches.sort("launch")
    durations = (launches["duration_us"].fill_null(0) * 1e3).round().cast(pl.Int64)
    # Nsight Compute replays each launch on its own: it measures kernels, not a timeline. No start time is made up
    # (laying them back to back would show a GPU 100% busy that never ran them together).
    kernels = launches.select(
        pl.col("kernel_name").alias("name"), pl.lit("kernel").alias("kind"), "device", "stream",
        pl.lit(None, dtype=pl.Int64).alias("start_ns"), durations.alias("dur_ns"),
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    ).with_row_index("kernel_id").with_columns(pl.col("kernel_id").cast(pl.Int64))
    measured = launches.with_columns(
        pl.col("kernel_name").alias("name"), pl.lit("unknown").alias("phase"),
        kernels["kernel_id"].alias("kernel_id"), pl.lit(True).alias("top_kernel"),
    )
    ncu = NcuInfo(phase="unknown", imported_from=[str(p) for p in paths], profiled_launches=launches.height,
                  sections=_sections(tables))
    info = imported_run_info(paths, Hardware(device_type="cuda", name=None), TraceInfo(format="ncu", event_count=0),
                             device_spec, ncu=ncu)
    run = Run(info=info, kernels=kernels, ops=pl.DataFrame(), ncu=measured)
    target = out or rundir.default_run_path(runs_dir, paths[0].stem, "ncu")
    with staging.staged_directory(target) as tmp:
        rundir.write_measurements(tmp, metrics=tables.metrics)
        write_run_directory(tmp, run, report=report, languages=languages)
    return target.resolve()


def _sections(tables: NcuTables) -> list[str]:
    return sorted(set(tables.metrics["section"]) - {""})


def _add_to_run(run_path: Path, tables: NcuTables, paths: list[Path], phase: str) -> Path:
    run = rundir.read_run(run_path, ops=False)
    joined = join_measurements(run.kernels, tables.launches, phase).with_columns(
        pl.col("name").is_not_null().alias("top_kernel"))
    if not joined["name"].is_not_null().any():
        raise UserError(f"{paths[0]}: none of its kernels matches a kernel of {run_path} in phase '{phase}'")
    ncu = NcuInfo(phase=phase, imported_from=[str(p) for p in paths], profiled_launches=tables.launches.height,
                  matched_launches=int(joined["name"].is_not_null().sum()), sections=_sections(tables))
    add_measurements(run_path, joined, tables.metrics, ncu)
    return run_path.resolve()
