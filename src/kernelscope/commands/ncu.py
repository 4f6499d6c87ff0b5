"""`kernelscope ncu RUN`: measure the top kernels of a phase with Nsight Compute and add the counters to the run.

The run's workload is re-run (commands/replay.py) under ncu, gated on the phase's NVTX ranges (the first few
steps) and on the top kernels' function names, profiling the first `launches` launches of each launch
configuration, with --clock-control none. The report is re-rendered with the measured tables."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope import ranges
from kernelscope.commands.arguments import positive_int
from kernelscope.errors import UserError

if TYPE_CHECKING:
    from kernelscope.analyze.costs.ncu_coverage import CoveragePlan
    from kernelscope.contracts.run import Run

HELP = "measure the top kernels of a run with Nsight Compute"
DESCRIPTION = (
    "Re-run a run's workload under Nsight Compute, gated on the phase's NVTX ranges and on the top kernels' "
    "names, profile the first launches of each launch configuration (--clock-control none), and add the "
    "counters to the run (ncu.parquet, ncu_metrics.parquet, ncu/) and its report."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="run directory made by `kernelscope profile` on a GPU")
    parser.add_argument("--top", type=positive_int, default=20,
                        help="kernels by total time in the phase (default 20)")
    parser.add_argument("--phase", default="decode",
                        help="a phase of the run: prefill, decode, or a model stage such as sam_encoder "
                             "(default decode)")
    parser.add_argument("--launches", type=positive_int, default=3,
                        help="launches profiled per launch configuration (default 3)")
    parser.add_argument("--sections", help="comma-separated ncu sections (default: SpeedOfLight, "
                        "MemoryWorkloadAnalysis, Occupancy, SpeedOfLight_RooflineChart, SchedulerStats, LaunchStats)")
    parser.add_argument("--timeout", type=positive_int, default=1800,
                        help="seconds before ncu is stopped (default 1800)")
    parser.add_argument("--coverage", type=_fraction, metavar="F",
                        help="instead of --top: every distinct (kernel, launch configuration) in descending device "
                             "time until F of the phase's kernel time is covered (e.g. 0.95), each profiled once, "
                             "its counters joined to every launch of it")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number between 0 and 1") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not above 0 and at most 1")
    return value


def run(args: argparse.Namespace, steps) -> int:
    sections = [x.strip() for x in args.sections.split(",") if x.strip()] if args.sections else None
    path = run_ncu(args.run, top=args.top, phase=args.phase, launches=args.launches, sections=sections,
                   timeout=args.timeout, steps=steps, coverage=args.coverage)
    print(path.resolve())
    return 0


@dataclass(frozen=True)
class Plan:
    """What to measure: the phase's top kernels and the NVTX ranges that gate the replay."""

    phase: str
    kernels: list[str]
    include: list[str]
    exclude: list[str]
    coverage: CoveragePlan | None = None


def run_ncu(run_path: Path, top: int = 20, phase: str = ranges.DECODE, launches: int = 3,
            sections: list[str] | None = None, timeout: float = 1800, steps=None, coverage: float | None = None
            ) -> Path:
    from kernelscope.capture import nsight_compute as nc
    from kernelscope.load import rundir
    from kernelscope.progress import SILENT

    steps = steps or SILENT
    run = rundir.read_run(run_path, ops=False)
    plan = _plan(run_path, run, top, phase, launches, coverage)
    launches = 1 if coverage else launches  # one launch per configuration stands for all of them
    ncu = nc.find_ncu()
    metrics = nc.choose_metrics(nc.available_metrics(ncu))
    sections = sections or nc.DEFAULT_SECTIONS
    with tempfile.TemporaryDirectory(prefix=".ncu.partial-", dir=run_path) as tmp:
        staging = Path(tmp)
        report = staging / "profile.ncu-rep"
        started = time.perf_counter()
        what = (f"{plan.coverage.configs.height} launch configurations ({plan.coverage.share:.1%} of {phase})"
                if plan.coverage else f"top {len(plan.kernels)} {phase} kernels")
        with steps.step(f"Nsight Compute: {what}, {launches} launch(es) per configuration"):
            nc.profile_command(
                ncu, report, [sys.executable, "-m", "kernelscope.commands.replay", str(run_path.resolve())],
                nvtx_include=plan.include, nvtx_exclude=plan.exclude, kernel_regex=_kernel_regex(plan.kernels),
                launches=launches, sections=sections, metrics=metrics, timeout=timeout,
            )
        wall = time.perf_counter() - started
        if not report.exists():
            raise UserError("ncu profiled no kernel: the NVTX or kernel-name filters matched nothing")
        _install(run_path, run, plan, staging, report, ncu,
                 dict(top=None if coverage else top, launches_per_config=launches, sections=sections, metrics=metrics,
                      wall_s=wall, coverage=coverage))
    return run_path


def _plan(run_path: Path, run: Run, top: int, phase: str, launches: int, coverage: float | None = None) -> Plan:
    import polars as pl

    from kernelscope.analyze.costs.ncu_coverage import coverage_plan
    from kernelscope.analyze.kernel_stats import kernel_summary
    from kernelscope.analyze.structure.phases import ordered_phases

    if run.info.source != "profile":
        raise UserError(f"{run_path}: `kernelscope ncu` re-runs the workload, so it needs a run made by "
                        "`kernelscope profile` (import Nsight Compute exports made elsewhere with `kernelscope import`)")
    if run.info.hardware.device_type != "cuda":
        raise UserError(f"{run_path}: a CPU run has no GPU kernels to measure")
    present = ordered_phases([p for p in run.kernels["phase"].unique().to_list() if p != ranges.UNKNOWN])
    if phase not in present:
        raise UserError(f"{run_path}: no phase '{phase}' in this run (its phases: {', '.join(present) or 'none'})")
    import torch

    if not torch.cuda.is_available():
        raise UserError("no CUDA GPU is available here: `kernelscope ncu` re-runs the workload on a GPU")
    kernels = run.kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel"))
    if kernels.height == 0:
        raise UserError(f"{run_path}: no kernels in phase '{phase}'")
    chosen_plan = coverage_plan(kernels, phase, coverage) if coverage else None
    chosen = chosen_plan.names if chosen_plan else kernel_summary(kernels).head(top)["name"].to_list()
    if phase == ranges.DECODE:
        step_count = kernels["step"].n_unique()
        # With --coverage every decode step is open: a configuration first seen in a later step is profiled there.
        include = [f"{ranges.phase_range(phase, i)}/" for i in range(step_count if coverage else
                                                                     min(step_count, launches))]
    else:
        include = [f"{ranges.phase_range(phase)}/"]
    # Model stages (vision encoders) run inside prefill's range, each in its own: leave them out of prefill.
    exclude = [f"{ranges.phase_range(p)}/" for p in present if p not in ranges.STEP_PHASES] \
        if phase == ranges.PREFILL else []
    return Plan(phase=phase, kernels=chosen, include=include, exclude=exclude, coverage=chosen_plan)


def _kernel_regex(names: list[str]) -> str:
    from kernelscope.analyze.costs.ncu_measurements import kernel_name_regex

    return kernel_name_regex(names)


def _install(run_path: Path, run: Run, plan: Plan, staging: Path, report: Path, ncu: str, settings: dict) -> None:
    """Join the measurements with the run's kernels and add them, the settings and ncu's files to the run."""
    import polars as pl

    from kernelscope.analyze.costs.ncu_coverage import every_launch, measured_share
    from kernelscope.analyze.costs.ncu_measurements import join_measurements
    from kernelscope.capture import nsight_compute as nc
    from kernelscope.contracts.trace_records import NcuInfo
    from kernelscope.load.ncu import read_ncu_csv
    from kernelscope.pipeline import add_measurements

    raw = nc.export_csv(ncu, report, "raw", staging / "raw.csv")
    details = nc.export_csv(ncu, report, "details", staging / "details.csv")
    tables = read_ncu_csv(raw)
    joined = join_measurements(run.kernels, tables.launches, plan.phase).with_columns(
        pl.col("name").is_in(plan.kernels).alias("top_kernel"))
    extra = {}
    if plan.coverage is not None:
        extra = dict(coverage=settings.pop("coverage"), configurations=plan.coverage.configs.height,
                     planned_share=plan.coverage.share,
                     measured_share=measured_share(every_launch(run.kernels, tables.launches, plan.phase)))
    else:
        settings.pop("coverage", None)
    info = NcuInfo(phase=plan.phase, kernels=plan.kernels, nvtx_include=plan.include, nvtx_exclude=plan.exclude,
                   profiled_launches=tables.launches.height, matched_launches=int(joined["name"].is_not_null().sum()),
                   ncu=ncu, **settings, **extra)
    add_measurements(run_path, joined, tables.metrics, info,
                     files={"profile.ncu-rep": report, "raw.csv": raw, "details.csv": details})
