"""The critical path of a run's steps (analyze/paths/critical_path) from a Run, and the tables a report shows of it:
per phase its steps and the share of each class; per phase what on the path takes the most time."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope.analyze.costs.gemm_table import module_pattern
from kernelscope.analyze.paths.critical_path import CriticalPath, critical_paths, several_ranks
from kernelscope.analyze.paths.path_walk import CLASSES
from kernelscope.contracts.run import Run

TOP = 15  # rows of a phase's table of what is on the path


def host_ops_of(ops: pl.DataFrame) -> pl.DataFrame | None:
    """The outermost CPU ops (depth 0) of an ops table; None where the table holds none (read without rows)."""
    if ops.height == 0 or "depth" not in ops.columns:
        return None
    return ops.filter((pl.col("cat") == "cpu_op") & (pl.col("depth") == 0))


def run_critical_paths(run: Run, host_ops: pl.DataFrame | None = None) -> CriticalPath | None:
    """The critical path of every step of `run` (its kernels with costs and catalog names: collectives are
    matched across ranks by analyze/ranks/communication). host_ops: the outermost CPU ops, where run.ops was read
    without rows (load/rundir.read_host_ops); by default those of run.ops."""
    from kernelscope.analyze.ranks.communication import communication

    kernels = run.kernels
    if kernels.height == 0 or kernels["start_ns"].is_null().all() or _profiled_one_by_one(run):
        return None
    comm = communication(kernels) if "category" in kernels.columns else None
    ops = host_ops if host_ops is not None else host_ops_of(run.ops)
    return critical_paths(kernels, run.calls, ops, comm.instances if comm is not None else None)


def _profiled_one_by_one(run: Run) -> bool:
    """A run made from Nsight Compute exports alone: its kernels ran one at a time under the profiler and were laid
    end to end; their times are no timeline to follow dependencies on."""
    ncu, trace = run.info.ncu, run.info.trace
    return bool(ncu is not None and ncu.imported_from and (trace is None or not trace.event_count))


def path_phase_table(path: CriticalPath) -> pl.DataFrame:
    """Per phase: steps, the mean step's wall time, the path's share of each class, the ranks it crosses (most in
    one step) and, with several ranks, the rank that decided most steps."""
    steps = path.steps
    shares = [(100.0 * pl.col(f"{c}_ns").sum() / pl.col("path_ns").sum()).alias(f"{c}_pct") for c in CLASSES]
    table = steps.group_by("phase", maintain_order=True).agg(
        pl.len().alias("steps"), pl.col("step_ns").mean().alias("mean_step_ns"),
        pl.col("step_ns").sum().alias("step_ns"), pl.col("path_ns").sum().alias("path_ns"), *shares,
        pl.col("ranks_on_path").max().alias("ranks_on_path"),
        pl.col("deciding_rank").mode().sort().first().alias("deciding_rank"),
    )
    if not several_ranks(path):
        table = table.drop("ranks_on_path", "deciding_rank")
    return table


def path_top(path: CriticalPath, phase: str, top: int = TOP) -> pl.DataFrame:
    """What of one phase's paths takes the most time: per class, kind, kernel or op and module (layer numbers
    folded into `*`), the time per step and the share of the path, longest first."""
    segments = path.segments.filter(pl.col("phase") == phase)
    steps = max(path.steps.filter(pl.col("phase") == phase).height, 1)
    total = segments["dur_ns"].sum() or 1
    return (segments.with_columns(module_pattern(pl.col("module")).alias("module"))
            .group_by("class", "kind", "name", "module")
            .agg(pl.col("dur_ns").sum().alias("path_ns"), pl.len().alias("segments"),
                 pl.col("rank").n_unique().alias("ranks"))
            .with_columns((pl.col("path_ns") / steps).alias("per_step_ns"),
                          (100.0 * pl.col("path_ns") / total).alias("path_pct"))
            .sort(["path_ns", "class", "name", "module"], descending=[True, False, False, False], nulls_last=True)
            .head(top))


@dataclass
class PathTables:
    """What a report shows of the critical path: the paths themselves, per phase its table and what is on it."""

    path: CriticalPath
    phases: pl.DataFrame
    top: dict[str, pl.DataFrame] = field(default_factory=dict)


def path_tables(run: Run, critical: CriticalPath | None = None) -> PathTables | None:
    """`critical` (the run's critical paths, computed here when not given) as the report's tables; None for runs
    without a timeline."""
    critical = critical if critical is not None else run_critical_paths(run)
    if critical is None or critical.steps.height == 0:
        return None
    phases = path_phase_table(critical)
    return PathTables(path=critical, phases=phases,
                      top={phase: path_top(critical, phase) for phase in phases["phase"].to_list()})
