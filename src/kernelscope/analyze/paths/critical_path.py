"""The critical path of every step (docs/critical-path.md): the chain of work, waits and host time through the
dependency graph (analyze/paths/dependency_graph) whose durations add up to the step's wall time, each segment classed
`compute`, `communication`, `wait`, `launch` or `host` and attributed to rank, module, layer and kernel or op.

A step is a (phase, generation, step) of the kernels table — a prefill, a decode step, an inferred step of a
serving engine or a training step (its forward, backward and optimizer parts together, phase `training`) — or, where the run knows no steps, the whole run (phase `unknown`). Its wall
time runs from the end of the step before it (steps in the order they end; the first step: from its first launch
call or kernel) to the end of its last device work (on a run without device activity: its last CPU op): the
period of a step, so that consecutive steps tile the timeline. On runs of several ranks a step spans all ranks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.paths.dependency_graph import DependencyGraph, dependency_graph
from kernelscope.analyze.paths.path_segments import STEP_KEY, segment_table
from kernelscope.analyze.paths.path_walk import BETWEEN, CLASSES, HOST, Walk, chase, cut, states
from kernelscope.analyze.structure.phases import end_ns
from kernelscope.analyze.structure.training_phases import TRAINING_PHASES
from kernelscope.contracts.tables import PATH_SEGMENT_COLUMNS

TRAINING_STEP = "training"  # the phase of a training step's path (its parts' phases are forward, backward, optimizer)
SEGMENT_SCHEMA = PATH_SEGMENT_COLUMNS


@dataclass
class CriticalPath:
    """segments: every step's path in time order (SEGMENT_SCHEMA); steps: one row per step (its window, its
    path's length per class, the rank holding most of it); graph: what the path was read from (what-if);
    windows: step_windows' table the paths were walked in."""

    segments: pl.DataFrame
    steps: pl.DataFrame
    graph: DependencyGraph
    windows: pl.DataFrame


def step_windows(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per step: phase, generation, step, own_start_ns (its first launch call or work), start_ns (the end of the
    step that ended before it, else own_start_ns), end_ns and last_kernel (the kernel_id that ends it)."""
    timed = kernels.filter(pl.col("start_ns").is_not_null()).with_columns(step_phase())
    if timed.height == 0:
        return pl.DataFrame(schema={**{k: SEGMENT_SCHEMA[k] for k in STEP_KEY}, "own_start_ns": pl.Int64,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64, "last_kernel": pl.Int64,
                                    "last_rank": pl.Int64, "last_pid": pl.Int64, "last_tid": pl.Int64})
    stepped = timed.filter(in_steps())
    if stepped.height == 0:  # no steps known: the whole run is one
        stepped = timed.with_columns(pl.lit(ranges.UNKNOWN).alias("phase"), pl.lit(None, pl.Int64).alias("step"),
                                     pl.lit(None, pl.Int64).alias("generation"))
    ends = end_ns(kernels)
    windows = stepped.group_by(STEP_KEY).agg(
        pl.min_horizontal(pl.col("launch_start_ns").min(), pl.col("start_ns").min()).alias("own_start_ns"),
        ends.max().alias("end_ns"), pl.col("kernel_id").sort_by(ends).last().alias("last_kernel"),
        *[pl.col(c).sort_by(ends).last().alias(f"last_{c}") for c in ("rank", "pid", "tid")],
    ).sort("end_ns", "own_start_ns", *STEP_KEY, nulls_last=True)
    return windows.with_columns(
        pl.coalesce(pl.col("end_ns").shift(1), "own_start_ns").alias("start_ns"),
    ).select(*STEP_KEY, "own_start_ns", "start_ns", "end_ns", "last_kernel", "last_rank", "last_pid",
             "last_tid").filter(pl.col("end_ns") > pl.col("start_ns"))


def step_phase() -> pl.Expr:
    """The phase a step is counted in: the forward, backward and optimizer parts of a training step are one step,
    `training`."""
    return (pl.when(pl.col("phase").is_in(TRAINING_PHASES)).then(pl.lit(TRAINING_STEP))
            .otherwise(pl.col("phase")).alias("phase"))


def in_steps() -> pl.Expr:
    """The kernels that belong to a step: those with a phase or a step number (on a run with none, every kernel
    belongs to the one step that is the whole run)."""
    return (pl.col("phase") != ranges.UNKNOWN) | pl.col("step").is_not_null()


def critical_paths(kernels: pl.DataFrame, calls: pl.DataFrame | None = None, host_ops: pl.DataFrame | None = None,
                   collectives: pl.DataFrame | None = None) -> CriticalPath | None:
    """Every step's critical path. None for runs without a timeline (kernel summaries)."""
    windows = step_windows(kernels)
    if windows.height == 0:
        return None
    graph = dependency_graph(kernels, calls, host_ops, collectives)
    if len(graph) == 0:
        return None
    return paths_of(graph, windows, _end_nodes(graph, windows))


def paths_of(graph: DependencyGraph, windows: pl.DataFrame, ends: np.ndarray) -> CriticalPath:
    """The path of each window (step_windows' columns), walked back from its end node (-1: none)."""
    table = states(graph)
    n_host = len(graph) - graph.n_device
    walks = []
    for i, (t_start, t_end) in enumerate(windows.select("start_ns", "end_ns").iter_rows()):
        node = int(ends[i])
        # A CPU op still running at the step's end is entered there; one that ended before, at its end.
        state = node + n_host if node >= graph.n_device and t_end < graph.end[node] else node
        walked = cut(table, chase(table, state, t_start) if node >= 0 else np.zeros(0, dtype=np.int64), t_start, t_end)
        if node >= 0 and t_start < graph.end[node] < t_end:  # host time after the last op that ended before
            walked = _appended(walked, int(graph.end[node]), t_end)
        walks.append(walked)
    del table  # the walk's per-state arrays, before the table's columns are made
    segments, lengths = segment_table(graph, walks, windows)
    return CriticalPath(segments=segments, steps=_step_table(windows, lengths), graph=graph, windows=windows)


def _appended(walked: Walk, start: int, end: int) -> Walk:
    values = (-1, start, end, HOST, BETWEEN, 0)
    return Walk(*[np.append(column, value) for column, value in zip(
        (walked.node, walked.start, walked.end, walked.cls, walked.what, walked.edge), values, strict=True)])


def _end_nodes(graph: DependencyGraph, windows: pl.DataFrame) -> np.ndarray:
    """The node each walk starts from: the device node of the step's last kernel, or on runs without device
    work the outermost CPU op of the step's last op's thread that was running last before the step's end (the one
    holding that op, where it is one)."""
    if graph.n_device:
        ids = graph.devices["kernel_id"].to_numpy()
        order = np.argsort(ids)
        pos = np.searchsorted(ids[order], windows["last_kernel"].to_numpy())
        pos = np.minimum(pos, len(ids) - 1)
        found = ids[order][pos] == windows["last_kernel"].to_numpy()
        return np.where(found, order[pos], -1)
    hosts = graph.hosts.with_row_index("_node")
    out = np.full(windows.height, -1, dtype=np.int64)
    for i, window in enumerate(windows.iter_rows(named=True)):
        mine = hosts.filter((pl.col("rank") == window["last_rank"]) & (pl.col("pid") == window["last_pid"])
                            & (pl.col("tid") == window["last_tid"]) & (pl.col("start_ns") < window["end_ns"]))
        if mine.height:
            reach = mine.select(pl.min_horizontal("end_ns", pl.lit(window["end_ns"])).alias("r"), "start_ns", "_node")
            out[i] = int(reach.sort("r", "start_ns")["_node"][-1]) + graph.n_device
    return out


def _step_table(windows: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """Per step: its window, the path's length (all of it and per class), the rank holding most of the path (ties:
    the lowest) and how many ranks the path crosses. segments: STEP_KEY, rank, class and dur_ns of the path's
    segments, or of their sums per step, rank and class."""
    per_class = segments.group_by(STEP_KEY).agg(
        pl.col("dur_ns").sum().alias("path_ns"),
        *[pl.col("dur_ns").filter(pl.col("class") == c).sum().alias(f"{c}_ns") for c in CLASSES],
        pl.col("rank").n_unique().alias("ranks_on_path"))
    by_rank = (segments.group_by(*STEP_KEY, "rank").agg(pl.col("dur_ns").sum().alias("_ns"))
               .sort("_ns", "rank", descending=[True, False]).group_by(STEP_KEY, maintain_order=True)
               .agg(pl.col("rank").first().alias("deciding_rank")))
    return (windows.select(*STEP_KEY, "start_ns", "end_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("step_ns"))
            .join(per_class, on=STEP_KEY, how="left", nulls_equal=True)
            .join(by_rank, on=STEP_KEY, how="left", nulls_equal=True))


def several_ranks(path: CriticalPath) -> bool:
    return len(np.unique(path.graph.rank)) > 1


def phase_summary(steps: pl.DataFrame, ranks: bool = False) -> dict[str, dict]:
    """summary.json `critical_path`: per phase, its steps, their wall time and path length (ns, summed over the
    steps), each class's share of the path, and on runs of several `ranks` how many steps each rank decided."""
    out: dict[str, dict] = {}
    for (phase,), rows in steps.group_by("phase", maintain_order=True):
        path = int(rows["path_ns"].sum())
        entry = {"steps": rows.height, "step_ns": int(rows["step_ns"].sum()), "path_ns": path,
                 "mean_step_ns": float(rows["step_ns"].mean()),
                 "shares": {c: (int(rows[f"{c}_ns"].sum()) / path if path else 0.0) for c in CLASSES}}
        if ranks:
            counts = rows.group_by("deciding_rank").len().sort("deciding_rank")
            entry["deciding_ranks"] = {str(r): int(n) for r, n in counts.iter_rows()}
        out[str(phase)] = entry
    return out
