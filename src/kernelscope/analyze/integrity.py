"""The integrity audit of a recorded file: what in it is not whole or not consistent, each counted, so that no
number of a report is quietly wrong (docs/run-format.md, "Integrity audit").

From the file's tables (as the reader gives them, before attribution) and what it holds besides (contracts.trace
FileMarks):
- device events that overlap on one stream: a kernel (copy, set) that starts before an earlier one on its
  (device, stream) has ended. Summed durations count the shared time twice (stream_overlap_ns: the sum of the
  durations less the union of the intervals, per stream); busy time counts it once. Programmatic dependent launch
  lets a kernel start before the previous one ends: overlaps launched through a call that can ask for it are
  counted apart (stream_overlaps_pdl);
- events outside the recorded window the file marks (Kineto's `Iteration Start` … `Record Window End`);
- calls that start device work with no device event of their correlation id, and device events with no call;
- flow arrows of which one end is missing;
- clock jumps: device events that start before the call that launched them;
- devices the file describes that have no event;
- an event array without its closing bracket (a cut file) and the bytes after its last complete event;
- events the reader left out or repaired (their reasons are in the file's `dropped_events`).
Everything counted stays in the tables as recorded.
"""

from __future__ import annotations

import polars as pl

from kernelscope.contracts.summary import IntegritySummary
from kernelscope.contracts.trace import TraceTables
from kernelscope.contracts.trace_records import TraceAudit
from kernelscope.load.sources import DEVICE_WORK_CALLS

# Launch calls through which programmatic dependent launch can be asked for (a launch attribute), and graph launches
# (a graph's edges can be programmatic): an overlap on one stream after such a launch is consistent with PDL.
PDL_CALLS = r"LaunchKernelEx|GraphLaunch"


def audit_trace(tables: TraceTables) -> TraceAudit:
    """The audit of one file's tables (times in ns from its origin, as the readers give them)."""
    kernels, launches, ops, meta = tables.kernels, tables.launches, tables.ops, tables.meta
    marks = meta.marks
    device = kernels.select("device", "stream", "start_ns", "dur_ns", "correlation")
    calls = (launches.filter(pl.col("correlation").is_not_null())
             .unique("correlation", keep="first", maintain_order=True)
             .select("correlation", pl.col("api"), pl.col("start_ns").alias("call_ns")))
    overlapping, overlap_ns, pdl = stream_overlaps(device, calls)
    linked = device.join(calls, on="correlation", how="inner")
    leads = linked.filter(pl.col("start_ns") < pl.col("call_ns")).select(pl.col("call_ns") - pl.col("start_ns"))
    starting = launches.filter(pl.col("api").str.contains(DEVICE_WORK_CALLS))
    with_events = device["correlation"].drop_nulls().unique()
    return TraceAudit(
        device_events=kernels.height,
        stream_overlaps=overlapping, stream_overlap_ns=overlap_ns, stream_overlaps_pdl=pdl,
        window_us=marks.window_us,
        outside_window=_outside(kernels, launches, ops, marks.window_us, meta.origin_us),
        launches_without_kernel=int(starting.filter(~pl.col("correlation").is_in(with_events.implode())
                                                    | pl.col("correlation").is_null()).height),
        kernels_without_launch=int(device.filter(~pl.col("correlation").is_in(calls["correlation"].implode())
                                                 | pl.col("correlation").is_null()).height),
        flows=marks.flows, flows_unpaired=marks.flows_unpaired,
        clock_jumps=leads.height, clock_jump_max_ns=int(leads.to_series().max()) if leads.height else 0,
        **_devices(meta.device_properties, kernels),
        unclosed=marks.unclosed, trailing_bytes=marks.trailing_bytes,
        dropped_events=sum(meta.dropped_events.values()),
    )


def summaries_audit() -> TraceAudit:
    """Kernel summaries (nsys stats) have no timeline: none of the checks of times applies."""
    return TraceAudit(timeline=False)


def stream_overlaps(device: pl.DataFrame, calls: pl.DataFrame) -> tuple[int, int, int]:
    """Events that start before an earlier one on their (device, stream) ended; the time counted twice (sum of
    durations less the union, per stream); how many of them were launched through a call that can ask for PDL."""
    if device.height == 0:
        return 0, 0, 0
    ordered = (device.with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
               .sort("device", "stream", "start_ns", "end_ns", nulls_last=True))
    lane = ["device", "stream"]
    reach = pl.col("end_ns").cum_max().shift(1).over(lane)
    ordered = ordered.with_columns(reach.alias("reach"))
    ordered = ordered.with_columns(
        (pl.col("reach").is_not_null() & (pl.col("start_ns") < pl.col("reach"))).alias("overlaps"),
        (pl.col("reach").is_null() | (pl.col("start_ns") > pl.col("reach"))).cum_sum().over(lane).alias("stretch"))
    union = (ordered.group_by(*lane, "stretch")
             .agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("length"))["length"].sum())
    overlapping = ordered.filter(pl.col("overlaps"))
    pdl = overlapping.join(calls, on="correlation", how="inner").filter(pl.col("api").str.contains(PDL_CALLS)).height
    return overlapping.height, int(ordered["dur_ns"].sum() - union), pdl


def _outside(kernels: pl.DataFrame, launches: pl.DataFrame, ops: pl.DataFrame,
             window_us: tuple[float, float] | None, origin_us: float) -> int | None:
    """Events starting before the window or ending after it (None: the file marks no window). The window's ends
    are counted from the origin as the tables' times are (ns, rounded)."""
    if window_us is None:
        return None
    first, last = (round((edge - origin_us) * 1e3) for edge in window_us)
    outside = (pl.col("start_ns") < first) | (pl.col("start_ns") + pl.col("dur_ns") > last)
    return sum(int(table.filter(outside).height) for table in (kernels, launches, ops))


def _devices(properties: list[dict], kernels: pl.DataFrame) -> dict[str, int | None]:
    """Devices the file describes, and how many of them have no device event (by id, else by position)."""
    if not properties:
        return {"devices_named": 0, "devices_silent": 0}
    named = [p.get("id", i) for i, p in enumerate(properties)]
    active = set(kernels["device"].drop_nulls().unique().to_list())
    return {"devices_named": len(named), "devices_silent": sum(1 for d in named if d not in active)}


# The counts of an audit that say something is missing or inconsistent, in the order the report lists them.
COUNTS = ("stream_overlaps", "outside_window", "launches_without_kernel", "kernels_without_launch", "flows_unpaired",
          "clock_jumps", "devices_silent", "unclosed_files", "trailing_bytes", "dropped_events")
_SUMMED = ("stream_overlaps", "stream_overlap_ns", "stream_overlaps_pdl", "outside_window", "launches_without_kernel",
           "kernels_without_launch", "flows", "flows_unpaired", "clock_jumps", "devices_named", "devices_silent")


def integrity_summary(audits: list[TraceAudit]) -> IntegritySummary | None:
    """The audits of a run's files added up (summary.json `integrity`); None for runs made before the audit."""
    if not audits:
        return None
    totals: dict[str, int | None] = {}
    for key in _SUMMED:
        values = [getattr(a, key) for a in audits if getattr(a, key) is not None]
        totals[key] = sum(values) if values else None
    jumps = [a.clock_jump_max_ns for a in audits if a.clock_jump_max_ns is not None]
    summary = IntegritySummary(
        files=len(audits), timeline=any(a.timeline for a in audits),
        device_events=sum(a.device_events for a in audits), **totals,
        clock_jump_max_ns=max(jumps) if jumps else None,
        unclosed_files=sum(a.unclosed for a in audits), trailing_bytes=sum(a.trailing_bytes for a in audits),
        dropped_events=sum(a.dropped_events for a in audits),
    )
    summary.counted = [key for key in COUNTS if getattr(summary, key)]
    return summary
