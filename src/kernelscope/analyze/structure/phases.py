"""Device time per phase and per decode step."""

from __future__ import annotations

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.launch_counts import launch_count
from kernelscope.contracts.tables import CPU_OP

PHASE_ORDER = [ranges.PREFILL, ranges.MIXED, ranges.DECODE, ranges.IDLE, ranges.UNKNOWN]
GENERATION = "generation"


def ordered_phases(names: list[str], first_start: dict[str, int | None] | None = None) -> list[str]:
    """Phases in report order: model stages (any phase other than prefill, decode, unknown: a vision encoder, a
    projector) in the order they first ran, then prefill, decode, unknown."""
    first_start = first_start or {}
    stages = [n for n in names if n not in PHASE_ORDER]
    stages.sort(key=lambda n: (first_start.get(n) is None, first_start.get(n) or 0, n))
    return stages + [n for n in PHASE_ORDER if n in names]


def end_ns(kernels: pl.DataFrame) -> pl.Expr:
    """When each row's work ends: its start plus its duration, where a CPU op's duration is its whole call
    (`op_dur_ns`: on CPU-only runs `dur_ns` is the op's self time, which a parent spends around its children, so
    start plus self time is not when it ended)."""
    whole = pl.coalesce(WHOLE_CALL, "dur_ns") if WHOLE_CALL in kernels.columns else pl.col("dur_ns")
    return pl.col("start_ns") + whole


def numbered_steps(kernels: pl.DataFrame) -> pl.Expr:
    """Distinct (generation, step) pairs among the rows with a step number. Most runs hold one generation (or
    none): the steps alone are then counted, without making a pair of every row (a third of the phase table)."""
    numbered = pl.col("step").is_not_null()
    if kernels[GENERATION].n_unique() <= 1:
        return pl.col("step").filter(numbered).n_unique()
    return pl.struct(GENERATION, "step").filter(numbered).n_unique()


def phase_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase: launches (kernel_count), device time, steps, device time and launches per step, share of all
    device time, and the span from the first kernel's start to the last kernel's end.

    A phase with step numbers counts its distinct steps (per generation, on runs that profile several generate()
    calls: decode on profiled runs, every inferred phase of an imported trace); another phase counts one step per
    generation (one on runs of one generation): per step is per image on a run of one generation per image. Steps
    stay null where they are unknown (decode without step numbers; phases of summary rows, which have no
    timeline), and so do the per-step figures. Span (first start to last end, per
    generation, summed), GPU busy and gaps need start times: null for summary rows."""
    total = kernels["dur_ns"].sum() or 1
    has_step = pl.col("step").is_not_null()
    decode_steps = numbered_steps(kernels)
    generations = pl.col(GENERATION).drop_nulls().n_unique()
    table = kernels.group_by("phase").agg(
        launch_count().alias("kernel_count"),
        pl.col("dur_ns").sum().alias("device_time_ns"),
        pl.when(has_step.any()).then(decode_steps).alias("_decode_steps"),
        pl.when(generations > 0).then(generations).otherwise(1).alias("_generations"),
        pl.col("start_ns").is_not_null().any().alias("_timeline"),
        pl.col("start_ns").min().alias("first_start_ns"),
        end_ns(kernels).max().alias("last_end_ns"),
    )
    table = table.with_columns(
        pl.when(pl.col("_decode_steps").is_not_null()).then(pl.col("_decode_steps"))
        .when((pl.col("phase") != ranges.DECODE) & pl.col("_timeline")).then(pl.col("_generations"))
        .cast(pl.Int64).alias("steps"),
    ).with_columns(
        (pl.col("device_time_ns") / pl.col("steps")).alias("device_time_per_step_ns"),
        (pl.col("kernel_count") / pl.col("steps")).alias("kernels_per_step"),
        (100.0 * pl.col("device_time_ns") / total).alias("time_pct"),
    ).drop("_decode_steps", "_generations", "_timeline")
    # Span: first start to last end, summed over the generations (not counting the time between them).
    spans = (
        kernels.group_by("phase", GENERATION)
        .agg(end_ns(kernels).max().alias("_end"), pl.col("start_ns").min().alias("_start"))
        .group_by("phase")
        .agg(pl.when(pl.col("_start").is_not_null().any()).then((pl.col("_end") - pl.col("_start")).sum())
             .alias("span_ns"))
    )
    table = table.join(spans, on="phase", how="left")
    timeline = kernels.select("phase", *_timeline_columns(kernels))  # groups copy only what busy_ns reads
    busy = pl.DataFrame(
        [(phase, *busy_and_lanes(group)) for phase, group in _phase_groups(timeline)],
        schema={"phase": pl.String, "busy_ns": pl.Int64, "_lanes": pl.Int64}, orient="row",
    )
    launch = launch_calls(kernels)  # placed after busy_ns, as the table's columns are ordered
    table = table.join(busy, on="phase", how="left").join(launch, on="phase", how="left")
    # Busy time is summed over the devices (each rank's GPUs); the span is one wall-clock stretch: on a run of several
    # GPUs, busy is the share of the span each was busy, averaged over them, and a gap is idle time on any of them.
    budget = pl.col("span_ns") * pl.col("_lanes")
    table = table.with_columns(
        (100.0 * pl.col("busy_ns") / budget).alias("busy_pct"),
        ((budget - pl.col("busy_ns")) / pl.col("kernel_count")).alias("mean_gap_ns"),
    ).drop("_lanes")
    return _ordered(table).drop("first_start_ns", "last_end_ns")


# A launch call is one API call on one host thread: the kernels of a CUDA-graph replay share the graph launch's.
_CALL = ("rank", "pid", "tid", "launch_start_ns")


def launch_calls(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase: mean and median host time of the API calls that launched its kernels, each call counted once.
    Copies and memsets are left out: the call of a synchronous one (cudaMemcpy, hipMemcpyWithStream) waits for the
    device (one such wait of half a second made a serving trace's mean 928 µs where its launches took 4.6 µs). The
    median is what one launch typically costs; the mean also carries the rare slow call (a first launch that
    loads its module: 343 ms in a 156-launch trace)."""
    schema = {"phase": pl.String, "mean_launch_ns": pl.Float64, "median_launch_ns": pl.Float64}
    if "launch_dur_ns" not in kernels.columns:
        return pl.DataFrame(schema=schema)
    key = list(_CALL) if all(c in kernels.columns for c in _CALL) else []  # (without them: every kernel's call)
    calls = (kernels.select("phase", "kind", "launch_dur_ns", *key)
             .filter((pl.col("kind") == "kernel") & pl.col("launch_dur_ns").is_not_null()))
    # Only where some launch calls start at the same time (graph launches, or ranks' clocks): a check of one column
    # costs a sixth of the de-duplication on four.
    if key and calls["launch_start_ns"].n_unique() < calls.height:
        calls = calls.unique(["phase", *key], keep="first")
    return calls.group_by("phase").agg(pl.col("launch_dur_ns").mean().cast(pl.Float64).alias("mean_launch_ns"),
                                       pl.col("launch_dur_ns").median().cast(pl.Float64).alias("median_launch_ns"))


# What one timeline is: a rank's device (ranks of a multi-rank import may all call theirs device 0); for the CPU ops
# of a CPU-only run (or rank), a rank's thread: a thread runs one op at a time, so the self times (dur_ns) of its
# ops add up to the time it was busy.
_LANE = ("rank", "device")
_CPU_LANE = ("rank", "pid", "tid")
WHOLE_CALL = "op_dur_ns"


def _has_cpu_ops(kernels: pl.DataFrame) -> bool:
    return "kind" in kernels.columns and bool((kernels["kind"] == CPU_OP).any())


def _timeline_columns(kernels: pl.DataFrame) -> list[str]:
    """What busy_and_lanes reads of a kernels table (a CPU op's thread and whole call only where there are any)."""
    wanted = (*_LANE, "start_ns", "dur_ns", *(("kind", "pid", "tid", WHOLE_CALL) if _has_cpu_ops(kernels) else ()))
    return [c for c in dict.fromkeys(wanted) if c in kernels.columns]


def _split(kernels: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows with a timeline: device work, and CPU ops (kind cpu_op); copied only where they must be told apart."""
    timed = kernels if not kernels["start_ns"].null_count() else kernels.filter(pl.col("start_ns").is_not_null())
    if not _has_cpu_ops(timed):
        return timed, timed.clear()
    cpu = pl.col("kind") == CPU_OP
    return timed.filter(~cpu), timed.filter(cpu)


def _columns(kernels: pl.DataFrame, lane: tuple[str, ...]) -> list[str]:
    return [c for c in lane if c in kernels.columns]


def _phase_groups(timeline: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Each phase's rows: a slice (no copy) where they lie together, as they do in runs kept in time order whose
    phases do not interleave; gathered by a group-by otherwise."""
    phase = timeline["phase"]
    begins = phase.ne_missing(phase.shift(1))  # where each stretch of one phase begins
    firsts = phase.filter(begins)
    if firsts.n_unique() < firsts.len():  # a phase comes back: its rows are not together
        return [(name, group) for (name,), group in timeline.group_by("phase")]
    starts = begins.arg_true().to_list()  # one per phase
    bounds = [*starts, timeline.height]
    return [(name, timeline.slice(start, end - start))
            for name, start, end in zip(firsts.to_list(), bounds, bounds[1:], strict=False)]


def busy_ns(kernels: pl.DataFrame) -> int | None:
    """Time during which at least one kernel runs (the union of kernel intervals), summed over devices (each rank's
    own), plus each CPU thread's op time (its ops' self times); None without start times (summary rows), and for
    CPU ops recorded without their whole calls' durations (runs imported before `op_dur_ns`: their spans end
    too early to hold their busy time)."""
    return busy_and_lanes(kernels)[0]


def busy_and_lanes(kernels: pl.DataFrame) -> tuple[int | None, int]:
    """busy_ns, and the timelines among `kernels` (rank and device pairs with start times; rank and thread for CPU
    ops), in one pass: each device timeline is met once for both."""
    device, cpu = _split(kernels)
    cpu_lanes = cpu.select(_columns(cpu, _CPU_LANE)).unique().height if cpu.height else 0
    lanes = _columns(device, _LANE)
    if cpu.height and (WHOLE_CALL not in cpu.columns or cpu[WHOLE_CALL].is_null().any()):
        return None, device.select(lanes).unique().height + cpu_lanes
    total = int(cpu["dur_ns"].sum()) if cpu.height else 0
    device_lanes = 0
    for _, group in device.select(*lanes, "start_ns", "dur_ns").group_by(*lanes):
        device_lanes += 1
        total += _union_ns(group["start_ns"].to_numpy(), group["dur_ns"].to_numpy())
    if device.height == 0 and cpu.height == 0:
        return None, 0
    return total, device_lanes + cpu_lanes


def _union_ns(start: np.ndarray, dur: np.ndarray) -> int:
    """Length of the union of the intervals [start, start + dur)."""
    end = start + dur
    if (start[1:] < start[:-1]).any():  # runs keep kernels in time order: sorted only where they are not
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    # A new busy stretch begins where a kernel starts after everything before it has ended.
    breaks = np.flatnonzero(start[1:] > reach[:-1]) + 1
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks - 1, [len(start) - 1]))
    return int((reach[last] - start[first]).sum())


def step_table(kernels: pl.DataFrame) -> pl.DataFrame:
    """Device time and launch count of each decode step (rows without a step number are left out); on runs of
    several generations, per generation and step."""
    several = kernels[GENERATION].drop_nulls().n_unique() > 1
    keys = [GENERATION, "step"] if several else ["step"]
    return (
        kernels.filter((pl.col("phase") == ranges.DECODE) & pl.col("step").is_not_null())
        .group_by(keys)
        .agg(launch_count().alias("kernel_count"), pl.col("dur_ns").sum().alias("device_time_ns"))
        .sort(keys)
    )


def steps_of_every_phase(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per step of any phase with step numbers, in time order: phase, generation, step, launches, device time, the
    first launch's start and the last kernel's end (null on summary rows)."""
    return (
        kernels.filter(pl.col("step").is_not_null())
        .group_by("phase", GENERATION, "step")
        .agg(launch_count().alias("kernel_count"), pl.col("dur_ns").sum().alias("device_time_ns"),
             pl.col("start_ns").min().alias("first_start_ns"),
             end_ns(kernels).max().alias("last_end_ns"))
        .sort("first_start_ns", "phase", "step", nulls_last=True)
    )


def step_counts(kernels: pl.DataFrame) -> dict[str, int]:
    """Steps per phase as the phase table counts them, at least 1: a phase with step numbers its distinct
    (generation, step) pairs, every other phase one per generation. Per-step figures anywhere divide by these."""
    if not kernels.height:
        return {}
    table = kernels.group_by("phase").agg(
        numbered_steps(kernels).alias("numbered_steps"),
        pl.col(GENERATION).drop_nulls().n_unique().alias("generations"),
    )
    return {
        phase: max(int(numbered if numbered or phase == ranges.DECODE else generations), 1)
        for phase, numbered, generations in table.iter_rows()
    }


def _ordered(table: pl.DataFrame) -> pl.DataFrame:
    first = dict(zip(table["phase"].to_list(), table["first_start_ns"].to_list(), strict=True))
    rank = {name: i for i, name in enumerate(ordered_phases(list(first), first))}
    return (
        table.with_columns(pl.col("phase").replace_strict(rank, return_dtype=pl.Int64).alias("_order"))
        .sort("_order")
        .drop("_order")
    )
