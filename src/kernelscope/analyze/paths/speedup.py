"""What shortening buys: each step of a run re-timed through its dependency graph with some work faster or slower
(analyze/paths/retime), against its measured wall time, with the new critical path; beside it what adding up the
targets' device time alone would have said (the difference between "this kernel is 30% of device time" and
"making it 2× faster saves 4% of the step")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.paths.critical_path import STEP_KEY, CriticalPath, in_steps, paths_of, step_phase
from kernelscope.analyze.paths.retime import Factors, Speedup, retime, speedup_factors


@dataclass
class SpeedupStudy:
    """steps: per step its wall time measured and re-timed (step_ns, new_step_ns, saved_ns, saved_pct) and the
    device time the targets would save if it all came off the step (sum_saved_ns); phases: the same per phase
    (sums over its steps); path: the new critical path."""

    speedups: list[Speedup]
    matched: dict[str, int]
    steps: pl.DataFrame
    phases: pl.DataFrame
    path: CriticalPath


def speedup_study(measured: CriticalPath, speedups: list[Speedup]) -> SpeedupStudy:
    """Raises ValueError for a target that names nothing (retime.speedup_factors)."""
    graph = measured.graph
    factors = speedup_factors(graph, speedups)
    faster = retime(graph, factors)
    windows, ends = _retimed_windows(measured, faster.start, faster.end)
    path = paths_of(faster, windows, ends)
    sums = _sum_saved(measured, factors)
    steps = (measured.steps.select(*STEP_KEY, "step_ns")
             .join(path.steps.select(*STEP_KEY, pl.col("step_ns").alias("new_step_ns"),
                                     *[pl.col(c).alias(f"new_{c}") for c in path.steps.columns if c.endswith("_ns")
                                       and c not in ("step_ns", "path_ns", "start_ns", "end_ns")],
                                     pl.col("deciding_rank").alias("new_deciding_rank")),
                   on=STEP_KEY, how="left", nulls_equal=True)
             .join(sums, on=STEP_KEY, how="left", nulls_equal=True)
             .with_columns((pl.col("step_ns") - pl.col("new_step_ns")).alias("saved_ns"),
                           pl.col("sum_saved_ns").fill_null(0.0)))
    steps = steps.with_columns((100.0 * pl.col("saved_ns") / pl.col("step_ns")).alias("saved_pct"),
                               (100.0 * pl.col("sum_saved_ns") / pl.col("step_ns")).alias("sum_saved_pct"))
    phases = steps.group_by("phase", maintain_order=True).agg(
        pl.len().alias("steps"), pl.col("step_ns").sum(), pl.col("new_step_ns").sum(), pl.col("saved_ns").sum(),
        pl.col("sum_saved_ns").sum(),
    ).with_columns((100.0 * pl.col("saved_ns") / pl.col("step_ns")).alias("saved_pct"),
                   (100.0 * pl.col("sum_saved_ns") / pl.col("step_ns")).alias("sum_saved_pct"))
    return SpeedupStudy(speedups=list(speedups), matched=factors.matched, steps=steps, phases=phases, path=path)


def _members(measured: CriticalPath) -> np.ndarray:
    """Per device node: the row of its step in measured.windows (-1: in no step)."""
    devices = measured.graph.devices
    windows = measured.windows.with_row_index("_window").with_columns(pl.col("_window").cast(pl.Int64))
    whole_run = windows.height == 1 and not devices.select(in_steps().any()).item()
    if whole_run:
        return np.zeros(devices.height, dtype=np.int64)
    keyed = devices.with_columns(step_phase()).select(STEP_KEY).with_columns(in_steps().alias("_in"))
    found = keyed.join(windows.select("_window", *STEP_KEY), on=STEP_KEY, how="left", maintain_order="left",
                       nulls_equal=True)
    return found.select(pl.when("_in").then("_window")).to_series().fill_null(-1).to_numpy().astype(np.int64)


def _retimed_windows(measured: CriticalPath, start: np.ndarray, end: np.ndarray) -> tuple[pl.DataFrame, np.ndarray]:
    """The steps' windows with re-timed nodes: each ends where its device work now ends last, starts where the
    step before it now ends (the first: its first launch call or work, re-timed)."""
    graph = measured.graph
    n_dev = graph.n_device
    member = _members(measured)
    count = measured.windows.height
    inside = member >= 0
    nodes = np.flatnonzero(inside)
    ends = np.full(count, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(ends, member[inside], end[:n_dev][inside])
    launch = graph.launch_pred
    first = np.where(launch >= 0, np.minimum(start[:n_dev], start[np.maximum(launch, 0)]), start[:n_dev])
    own = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(own, member[inside], first[inside])
    end_node = np.full(count, -1, dtype=np.int64)
    order = np.lexsort((end[:n_dev][nodes], member[nodes]))  # per window, its nodes by end: the last one ends it
    grouped = member[nodes][order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = grouped[1:] != grouped[:-1]
    end_node[grouped[last]] = nodes[order][last]
    starts = np.concatenate([[own[0]], ends[:-1]]) if count else own
    windows = measured.windows.with_columns(pl.Series("own_start_ns", own), pl.Series("start_ns", starts),
                                            pl.Series("end_ns", ends))
    return windows, end_node


def _sum_saved(measured: CriticalPath, factors: Factors) -> pl.DataFrame:
    """Per step: the device time the kernels and modules named would shed, added up as if all of it came off the
    step (classes compute and communication count their device work; the other classes have no such sum)."""
    graph = measured.graph
    n_dev = graph.n_device
    dur = (graph.end[:n_dev] - graph.start[:n_dev]).astype(np.float64)
    total = factors.device * np.where(graph.communication, factors.classes["communication"],
                                      factors.classes["compute"])
    saved = dur * (1.0 - 1.0 / total)
    member = _members(measured)
    per = np.zeros(measured.windows.height, dtype=np.float64)
    inside = member >= 0
    np.add.at(per, member[inside], saved[inside])
    return measured.windows.select(STEP_KEY).with_columns(pl.Series("sum_saved_ns", per))
