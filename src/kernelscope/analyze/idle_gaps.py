"""Idle gaps: the stretches in which a GPU ran nothing, between the end of everything it had started and the start of
its next kernel, copy or memset, per GPU (a rank's device).

A gap is charged to the phase of the work that ends it. For each gap the kernel whose end opened it (the one that
ran longest of all before it) and the one that closed it are named, with the framework op that launched the latter
and how long after the GPU went idle the host called that launch: the host wait. A gap that is mostly host wait is
the GPU waiting for the host (launch overhead, Python, a scheduler, the next request); a gap whose kernel was
launched before it began waited for something else (a copy from the host, an event, another stream's work).
Only traces with start times on a device have gaps: not kernel summaries, not CPU-only runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.contracts.tables import CPU_OP

TOP_GAPS = 10  # rows of the largest-gaps table in a report
_LANE = ("rank", "device")


@dataclass
class IdleGaps:
    """per_phase: phase, gaps, idle_ns (their sum), largest_ns, largest_pct (of idle_ns), host_wait_pct (of the idle
    time of gaps whose closing launch call is known). largest: the `top` largest gaps of the run, largest first:
    phase, rank, device, gpu (rank:device, where the run has several GPUs), gap_ns, at_ns (from the first device
    activity of the trace), before, after (kernel labels), op (the framework op that launched `after`),
    host_wait_ns (null without a launch call)."""

    per_phase: pl.DataFrame
    largest: pl.DataFrame


def idle_gaps(kernels: pl.DataFrame, labels: pl.DataFrame | None = None, top: int = TOP_GAPS) -> IdleGaps | None:
    """The run's idle gaps (None where it has no device timeline or no gap). labels: name → label (naming.py)."""
    if "start_ns" not in kernels.columns:
        return None
    lane = [c for c in _LANE if c in kernels.columns]
    optional = [c for c in ("launch_start_ns", "top_op") if c in kernels.columns]
    timed = (kernels.select("phase", "kind", "name", "start_ns", "dur_ns", *lane, *optional)
             .filter((pl.col("kind") != CPU_OP) & pl.col("start_ns").is_not_null())
             .drop("kind"))
    if timed.height < 2:
        return None
    # Per GPU in start order: how far its work reaches so far, a running maximum of ends. In NumPy, and only the
    # largest gaps made into rows: on a trace of 1.5 million launches nearly every launch follows a gap.
    order = timed.select(pl.arg_sort_by([*lane, "start_ns", "dur_ns"])).to_series().to_numpy()
    start = timed["start_ns"].to_numpy()[order]
    end = start + timed["dur_ns"].fill_null(0).to_numpy()[order]
    index = np.arange(timed.height)
    reach, holder = np.empty_like(end), np.empty_like(index)
    first_of_lane = _lane_starts(timed.select(lane)[order] if lane else timed, lane)
    for lo, hi in zip(first_of_lane, [*first_of_lane[1:], timed.height], strict=True):
        reach[lo:hi] = np.maximum.accumulate(end[lo:hi])
        holder[lo:hi] = np.maximum.accumulate(np.where(end[lo:hi] == reach[lo:hi], index[lo:hi], -1))
    opened = np.empty_like(reach)  # where the GPU went idle before each launch: the reach of those before it
    opened[1:] = reach[:-1]
    gap = start - opened
    gap[first_of_lane] = 0  # a GPU's first launch opens no gap
    at = np.nonzero(gap > 0)[0]
    if at.size == 0:
        return None
    if "launch_start_ns" in optional:
        launch = timed["launch_start_ns"].to_numpy()[order[at]].astype(np.float64)  # nulls: NaN
        wait = np.clip(launch - opened[at], 0, gap[at])
    else:
        wait = np.full(at.size, np.nan)
    per_phase = _per_phase(timed["phase"].gather(order[at]), gap[at], wait, opened[at])
    chosen = at[np.lexsort((at, -gap[at]))[:top]]  # largest first; equal gaps in timeline order
    rows = timed[order[chosen]].with_columns(
        pl.Series("gap_ns", gap[chosen]), pl.Series("at_ns", opened[chosen] - int(start.min())),
        pl.Series("before", timed["name"].gather(order[holder[chosen - 1]])),
        pl.Series("host_wait_ns", wait[np.searchsorted(at, chosen)], nan_to_null=True).cast(pl.Int64))
    return IdleGaps(per_phase=per_phase, largest=_largest(rows, lane, optional, labels, len(first_of_lane) > 1))


def _lane_starts(timed: pl.DataFrame, lane: list[str]) -> list[int]:
    """Row numbers where each GPU's launches begin (timed is sorted by GPU first)."""
    if not lane:
        return [0]
    changed = timed.select(pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in lane)
                           .fill_null(True).arg_true())
    return changed.to_series().to_list()


def _per_phase(phases: pl.Series, gap: np.ndarray, wait: np.ndarray, opened: np.ndarray) -> pl.DataFrame:
    """Phases in the order their first gap opened."""
    known = ~np.isnan(wait)
    frame = pl.DataFrame({"phase": phases, "gap_ns": gap, "_wait": np.where(known, wait, 0.0),
                          "_known": np.where(known, gap, 0), "_opened": opened})
    return (frame.group_by("phase")
            .agg(pl.len().alias("gaps"), pl.col("gap_ns").sum().alias("idle_ns"),
                 pl.col("gap_ns").max().alias("largest_ns"), pl.col("_wait").sum(), pl.col("_known").sum(),
                 pl.col("_opened").min())
            .with_columns((100.0 * pl.col("largest_ns") / pl.col("idle_ns")).alias("largest_pct"),
                          pl.when(pl.col("_known") > 0).then(100.0 * pl.col("_wait") / pl.col("_known"))
                          .alias("host_wait_pct"))
            .sort("_opened", "phase")
            .drop("_wait", "_known", "_opened"))


def _largest(rows: pl.DataFrame, lane: list[str], optional: list[str], labels: pl.DataFrame | None,
             several_gpus: bool) -> pl.DataFrame:
    rows = rows.rename({"name": "after"})
    # Which GPU, where the run has several: rank:device.
    gpu = (pl.concat_str([pl.col(c).cast(pl.String).fill_null("?") for c in lane], separator=":")
           if several_gpus and lane else pl.lit(None, dtype=pl.String))
    if labels is not None:  # a name without a label stays as it is
        labelled = labels.filter(pl.col("label").is_not_null())
        rows = rows.with_columns(pl.col(c).replace(labelled["name"], labelled["label"]) for c in ("before", "after"))
    op = pl.col("top_op") if "top_op" in optional else pl.lit(None, dtype=pl.String)
    return rows.select("phase", *lane, gpu.alias("gpu"), "gap_ns", "at_ns", "before", "after", op.alias("op"),
                       "host_wait_ns")
