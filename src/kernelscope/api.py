"""The Python API for notebooks and scripts (docs/dataset.md): one run as typed metadata and Polars frames, many
runs as DuckDB relations. `kernelscope.open_run` and `kernelscope.open_runs` lead here, imported on first use."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.dataset import VIEWS, Dataset, open_dataset

if TYPE_CHECKING:
    import duckdb

    from kernelscope.analyze.comparison.metrics import Estimate, Verdict


@dataclass(frozen=True)
class RunData:
    """A run directory in memory. info: run.json; summary: summary.json (None if the run has none); kernels and
    ops: its tables with every column of the run format (docs/run-format.md); ncu: Nsight Compute measurements,
    when collected."""

    path: Path
    info: RunInfo
    summary: Summary | None
    kernels: pl.DataFrame
    ops: pl.DataFrame
    ncu: pl.DataFrame | None


def open_run(path: str | PathLike[str]) -> RunData:
    """The run directory at `path`; a missing or broken run raises UserError naming the file."""
    directory = Path(path)
    run = rundir.read_run(directory)
    summary = rundir.read_summary(directory) if (directory / rundir.SUMMARY_JSON).is_file() else None
    return RunData(path=directory.resolve(), info=run.info, summary=summary, kernels=run.kernels, ops=run.ops,
                   ncu=run.ncu)


def estimates(run: RunData) -> dict[str, Estimate]:
    """A run's metrics (analyze/comparison/metrics.py, the definitions report, compare and check use): the unprofiled
    timings by key (`ttft_ms`, `tpot_ms`, `tokens_per_s`, `decode_tokens_per_s`, `e2e_ms`: medians of the timed
    runs) and the mean device time per step of each phase (`step:decode`, `step:prefill`, …), each with its repeats
    and noise."""
    from kernelscope.analyze.comparison import metrics
    from kernelscope.analyze.structure.phases import phase_table

    per_step = {row["phase"]: row["device_time_per_step_ns"] for row in phase_table(run.kernels).iter_rows(named=True)}
    steps = metrics.step_estimates(run.kernels, per_step)
    return {**metrics.timing_estimates(run.info), **{f"step:{phase}": e for phase, e in steps.items()}}


def verdicts(baseline: RunData, candidate: RunData, max_slowdown: float | None = None) -> dict[str, Verdict]:
    """The verdict on every metric both runs have (keys as `estimates`), by the one rule `compare` and `check` use:
    `.status` (`worse`, `better`, `within noise`), `.direction` (slower, faster, higher, lower), `.change`,
    `.threshold`, `.basis`. `max_slowdown`: a fixed threshold (a fraction), as `check --max-slowdown`."""
    from kernelscope.analyze.comparison import metrics
    base, cand = estimates(baseline), estimates(candidate)
    out = {}
    for key in base.keys() & cand.keys():
        verdict = metrics.judge(base[key], cand[key], max_slowdown)
        if verdict is not None:
            out[key] = verdict
    return dict(sorted(out.items()))


def open_runs(paths: str | PathLike[str] | Iterable[str | PathLike[str]], view: str = "runs") -> duckdb.DuckDBPyRelation:
    """One view of the runs under `paths` (run directories, folders of runs, globs, remote locations) as a DuckDB
    relation: `runs` (default), `kernels`, `ops`, `ncu` or `steps`. The views are those of `kernelscope query`;
    `connect_runs` gives the connection that holds them all."""
    if view not in VIEWS:
        raise UserError(f"open_runs: view is one of {', '.join(VIEWS)}, got {view!r}")
    return connect_runs(paths).con.table(view)


def connect_runs(paths: str | PathLike[str] | Iterable[str | PathLike[str]]) -> Dataset:
    """The runs under `paths` as a Dataset: `.con` (a DuckDB connection with every view), `.query(sql)`, `.runs`."""
    if isinstance(paths, str | PathLike):
        paths = [paths]
    return open_dataset([str(p) for p in paths])
