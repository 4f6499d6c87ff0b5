"""The steps every command that makes or changes a run shares, between the stages and the commands: costs and
names, the summary, the run directory and its report; Nsight Compute results added to a run."""

from __future__ import annotations

import functools
from pathlib import Path

import msgspec
import polars as pl

from kernelscope.allocator import trim_native_heap
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.hardware import Ceilings, ceilings_for
from kernelscope.analyze.paths.critical_path import CriticalPath
from kernelscope.analyze.paths.path_tables import run_critical_paths
from kernelscope.analyze.structure.phases import phase_table
from kernelscope.analyze.summary import summarize
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.contracts.trace_records import NcuInfo
from kernelscope.load import rundir
from kernelscope.load.calibration import find_calibration
from kernelscope.load.staging import updating_run
from kernelscope.progress import SILENT, Steps
from kernelscope.report.languages import LANGUAGES

TOP_N = 20  # kernels per phase in a report's top tables


def run_ceilings(info: RunInfo) -> Ceilings | None:
    """Ceilings of the run's device: measured (if calibrated on a machine like it) or datasheet."""
    name = info.hardware.name
    spec_key = info.hardware.spec or None  # UNSET reads as None
    return ceilings_for(name, find_calibration(name), info.hardware.memory_bytes, spec_key)


def with_energy_split(run: Run) -> Run:
    """The run with run.json's `energy.split` (analyze/energy_split.py) where it has an energy section and its
    tables; otherwise as it is."""
    from kernelscope.analyze.energy_split import energy_split

    energy = run.info.energy
    if energy is None or run.energy is None:
        return run
    split = energy_split(run.energy.samples, run.energy.windows, run.kernels, run_ceilings(run.info))
    run.info = run.info.replace(energy=msgspec.structs.replace(energy, split=split))
    return run


def write_run_directory(directory: Path, run: Run, report: bool = True,
                        languages: tuple[str, ...] = LANGUAGES, steps: Steps = SILENT) -> Summary:
    """Costs and names for every kernel, then run.json, summary.json, the tables and (optionally) the report,
    into `directory` (a staging directory of load.staging.staged_directory). steps: the stages shown."""
    if report:
        _start_figure_helpers()
    with steps.step("Costs, names and the run's summary"):
        run = with_energy_split(with_costs_and_names(run))
        phases = phase_table(run.kernels)  # the summary's and the report's
        critical = run_critical_paths(run)  # likewise
        summary = summarize(run, phases, critical)
    segments = critical.segments if critical is not None else None
    if not report:
        with steps.step("Writing the tables"):
            # The path's segments are written first and let go, with the graph they were read from, before the
            # run's own tables are written (at ~1 GB of trace they are a third of a gigabyte).
            del critical
            rundir.write_critical_path(directory, segments)
            segments = None
            trim_native_heap()  # the critical path's NumPy arrays, freed into glibc's heaps
            rundir.write_run(directory, run, summary)
        return summary
    from kernelscope.report.render import render_report  # matplotlib and Jinja are imported only for a report

    # The run's tables are written while the first figures are drawn (they were the figures' wait).
    with steps.step(f"Writing the tables and the report ({', '.join(languages)})"):
        render_report(run, summary, directory / rundir.REPORT_DIR, top_n=TOP_N, ceilings=run_ceilings(run.info),
                      languages=languages, meanwhile=lambda: rundir.write_run(directory, run, summary, segments),
                      phases=phases, critical=critical)
    return summary


def rerender(run_dir: Path, top_n: int = TOP_N, languages: tuple[str, ...] = LANGUAGES,
             rank: int | None = None) -> Path:
    """The run's report (and summary.json) again from its stored tables; the old report stays until the new one
    is complete. Returns report.md. With `rank`: the report of that rank alone, into report-rank<k>/ (every
    section over that rank's rows; the run's own report and summary stay as they are)."""
    _start_figure_helpers()
    run = with_costs_and_names(rundir.read_run(run_dir, ops=False))
    host_ops = rundir.read_host_ops(run_dir)
    if rank is None:
        run = with_energy_split(run)
        with updating_run(run_dir) as staging:
            _report_into(staging, run, top_n, languages, run_critical_paths(run, host_ops))
        return run_dir / rundir.REPORT_DIR / "report.md"
    one = _one_rank(run, rank, run_dir)
    folder = rundir.rank_report_dir(rank)
    mine = host_ops.filter(pl.col("rank") == rank) if "rank" in host_ops.columns else host_ops
    with updating_run(run_dir) as staging:
        render_report_of(one, staging / folder, top_n, languages, run_critical_paths(one, mine))
    return run_dir / folder / "report.md"


def _one_rank(run: Run, rank: int, run_dir: Path) -> Run:
    from kernelscope.errors import UserError

    ranks = sorted(run.kernels["rank"].unique().to_list()) if "rank" in run.kernels.columns else []
    if len(ranks) < 2 or rank not in ranks:
        held = f"ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else "one rank"
        raise UserError(f"--rank {rank}: {run_dir} holds {held}")
    info = run.info
    if info.parallel is not None:
        mine = [r for r in info.parallel.ranks if r.rank == rank]
        info = info.replace(parallel=msgspec.structs.replace(info.parallel, ranks=mine))
        if mine and info.timings is not None:  # its own latency, not rank 0's
            info = info.replace(timings=msgspec.structs.replace(info.timings, plain=mine[0].timings))
    return Run(info=info, kernels=run.kernels.filter(pl.col("rank") == rank),
               ops=run.ops.filter(pl.col("rank") == rank) if "rank" in run.ops.columns else run.ops, ncu=run.ncu,
               calls=run.calls.filter(pl.col("rank") == rank) if run.calls is not None else None)


def render_report_of(run: Run, directory: Path, top_n: int = TOP_N, languages: tuple[str, ...] = LANGUAGES,
                     critical: CriticalPath | None = None) -> None:
    from kernelscope.report.render import render_report

    critical = critical if critical is not None else run_critical_paths(run)
    render_report(run, functools.partial(summarize, run, critical=critical), directory, top_n=top_n,
                  ceilings=run_ceilings(run.info), languages=languages, critical=critical)


def add_measurements(run_dir: Path, measured: pl.DataFrame, metrics: pl.DataFrame, ncu: NcuInfo,
                     files: dict[str, Path] | None = None) -> None:
    """Nsight Compute results into a run: ncu.parquet (the run's kernels joined with the measured launches),
    ncu_metrics.parquet, run.json's `ncu` section, `files` (name → file) under ncu/, the summary and the report,
    all swapped in together once everything is written."""
    stored = with_costs_and_names(rundir.read_run(run_dir, ops=False))
    run = Run(info=stored.info.replace(ncu=ncu), kernels=stored.kernels, ops=stored.ops, ncu=measured,
              calls=stored.calls, energy=stored.energy)
    critical = run_critical_paths(run, rundir.read_host_ops(run_dir))
    with updating_run(run_dir) as staging:
        rundir.write_measurements(staging, measured, metrics, files)
        rundir.write_json(staging / rundir.RUN_JSON, run.info)
        _report_into(staging, run, TOP_N, LANGUAGES, critical)


def _start_figure_helpers() -> None:
    """The fork server the report's figure helpers start from loads matplotlib while this process reads and
    writes the run's tables."""
    from kernelscope.report.figure_jobs import warm_up_helper

    warm_up_helper()


def _report_into(staging: Path, run: Run, top_n: int, languages: tuple[str, ...],
                 critical: CriticalPath | None) -> None:
    from kernelscope.report.render import render_report

    # Summarized once the first figures are being drawn (render_report), not before, from the report's phase table.
    made: list[Summary] = []

    def summary_of(phases: pl.DataFrame) -> Summary:
        made.append(summarize(run, phases, critical))
        return made[-1]

    render_report(run, summary_of, staging / rundir.REPORT_DIR, top_n=top_n, ceilings=run_ceilings(run.info),
                  languages=languages, critical=critical)
    rundir.write_json(staging / rundir.SUMMARY_JSON, made[-1])
    rundir.write_critical_path(staging, critical.segments if critical is not None else None)
