"""`kernelscope ncu RUN`: measure the top kernels of a phase with Nsight Compute and add the counters to the run.

The run's workload is re-run (commands/replay.py) under ncu, gated on the phase's NVTX ranges (the first few
steps) and on the top kernels' function names, profiling the first `launches` launches of each launch
configuration, with --clock-control none. The report is re-rendered with the measured tables."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.measured import join_measurements, kernel_name_regex
from kernelscope.analyze.phases import ordered_phases
from kernelscope.capture import nsight_compute as nc
from kernelscope.commands.report import rerender
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.ncu import read_ncu_csv


def run_ncu(run_path: Path, top: int = 20, phase: str = ranges.DECODE, launches: int = 3,
            sections: list[str] | None = None, timeout: float = 1800, steps=None) -> Path:
    profile = rundir.read_run(run_path)
    if profile.run.get("source") != "profile":
        raise UserError(f"{run_path}: `kernelscope ncu` re-runs the workload, so it needs a run made by "
                        "`kernelscope profile` (import Nsight Compute exports made elsewhere with `kernelscope import`)")
    if (profile.run.get("hardware") or {}).get("device_type") != "cuda":
        raise UserError(f"{run_path}: a CPU run has no GPU kernels to measure")
    present = ordered_phases([p for p in profile.kernels["phase"].unique().to_list() if p != ranges.UNKNOWN])
    if phase not in present:
        raise UserError(f"{run_path}: no phase '{phase}' in this run (its phases: {', '.join(present) or 'none'})")
    import torch

    if not torch.cuda.is_available():
        raise UserError("no CUDA GPU is available here: `kernelscope ncu` re-runs the workload on a GPU")
    kernels = profile.kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel"))
    if kernels.height == 0:
        raise UserError(f"{run_path}: no kernels in phase '{phase}'")
    chosen = kernel_summary(kernels).head(top)["name"].to_list()
    step_count = kernels["step"].n_unique() if phase == ranges.DECODE else 1
    if phase == ranges.DECODE:
        include = [f"{ranges.phase_range(phase, i)}/" for i in range(min(step_count, launches))]
    else:
        include = [f"{ranges.phase_range(phase)}/"]
    # Model stages (vision encoders) run inside prefill's range, each in its own: leave them out of prefill.
    exclude = [f"{ranges.phase_range(p)}/" for p in present if p not in ranges.STEP_PHASES] \
        if phase == ranges.PREFILL else []
    ncu = nc.find_ncu()
    metrics = nc.choose_metrics(nc.available_metrics(ncu))
    sections = sections or nc.DEFAULT_SECTIONS
    staging = Path(tempfile.mkdtemp(prefix=".ncu.partial-", dir=run_path))
    try:
        report = staging / "profile.ncu-rep"
        started = time.perf_counter()
        with _step(steps, f"Nsight Compute: top {len(chosen)} {phase} kernels, {launches} launch(es) per configuration"):
            nc.profile_command(
                ncu, report, [sys.executable, "-m", "kernelscope.commands.replay", str(run_path.resolve())],
                nvtx_include=include, nvtx_exclude=exclude, kernel_regex=kernel_name_regex(chosen), launches=launches,
                sections=sections, metrics=metrics, timeout=timeout,
            )
        wall = time.perf_counter() - started
        if not report.exists():
            raise UserError("ncu profiled no kernel: the NVTX or kernel-name filters matched nothing")
        raw = nc.export_csv(ncu, report, "raw", staging / "raw.csv")
        nc.export_csv(ncu, report, "details", staging / "details.csv")
        tables = read_ncu_csv(raw)
        joined = join_measurements(profile.kernels, tables.launches, phase)
        joined = joined.with_columns(pl.col("name").is_in(chosen).alias("top_kernel"))
        joined.write_parquet(staging / rundir.NCU)
        tables.metrics.write_parquet(staging / rundir.NCU_METRICS)
        settings = {"phase": phase, "top": top, "launches_per_config": launches, "sections": sections,
                    "metrics": metrics, "nvtx_include": include, "nvtx_exclude": exclude, "kernels": chosen,
                    "wall_s": wall,
                    "profiled_launches": tables.launches.height,
                    "matched_launches": int(joined["name"].is_not_null().sum()), "ncu": ncu}
        _install(run_path, staging, settings)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rerender(run_path, 20)
    return run_path


def _install(run_path: Path, staging: Path, settings: dict) -> None:
    """Move the results into the run directory and record the settings in run.json."""
    ncu_dir = run_path / "ncu"
    if ncu_dir.exists():
        shutil.rmtree(ncu_dir)
    ncu_dir.mkdir()
    for name in ("profile.ncu-rep", "raw.csv", "details.csv"):
        shutil.move(staging / name, ncu_dir / name)
    for name in (rundir.NCU, rundir.NCU_METRICS):
        shutil.move(staging / name, run_path / name)
    shutil.rmtree(staging, ignore_errors=True)
    run_json = run_path / rundir.RUN_JSON
    run = json.loads(run_json.read_text(encoding="utf-8"))
    run["ncu"] = settings
    rundir.write_json(run_json, run)


class _step:
    def __init__(self, steps, text: str) -> None:
        self._context = steps.step(text) if steps is not None else None

    def __enter__(self):
        return self._context.__enter__() if self._context else None

    def __exit__(self, *exc):
        return self._context.__exit__(*exc) if self._context else False
