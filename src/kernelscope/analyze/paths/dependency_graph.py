"""The dependency graph of a run, read from its trace tables: what each piece of work waited for.

Nodes are the device work (kernels, copies, sets: one node per kernels row with a start) and the host's runtime
calls (the launch calls the kernels name, and calls.parquet: synchronisations, event records and waits). On a run
without device activity the host nodes are the outermost CPU ops. Edges, each with the time it was satisfied
(its anchor) and the lag observed after it:
- stream: a device node follows the previous work of its stream (anchor: that work's end);
- launch: a device node follows its launch call, CUDA-graph launches included (anchor: the call's start);
- event / inferred: a device node that started later than both of those follows work of another stream of its
  device that ended just before it (event: its thread called cudaStreamWaitEvent since the stream's previous
  launch; inferred: no such call, but a delay nothing else explains; data/critical_path.toml has the windows);
- thread: a host node follows the previous call on its thread; the time between them is host work, split into
  time inside outermost CPU ops that launched device work (`launch`) and the rest (`host`);
- sync: a blocking call (synchronisations, copies) returns after the device work of its rank that ended while it
  waited (the last such work: Kineto records no stream for the call);
- collective: a matched collective (analyze/ranks/communication) moves data only once the last rank has entered it.
Which edge decided a node's start (its `binding` edge) is the one whose anchor plus the typical lag of its kind is
latest; typical lags are medians of the trace's clear cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.paths.graph_edges import (
    covered_between,
    dense_codes,
    latest_before,
    merged_intervals,
    previous_in_group,
)
from kernelscope.contracts.tables import CPU_OP
from kernelscope.load import knowledge

DEVICE_KINDS = ("kernel", "memcpy", "memset")
EDGES = ("none", "stream", "launch", "event", "inferred", "thread", "sync", "collective", "unexplained")
NONE, STREAM, LAUNCH, EVENT, INFERRED, THREAD, SYNC, COLLECTIVE, UNEXPLAINED = range(len(EDGES))
# Columns of the device nodes the graph is built from and then lets go (the graph is held while the path's segments
# are made from it).
_BUILD_ONLY = ("lane", "end_ns", "pid", "tid", "launch_api", "launch_start_ns", "launch_dur_ns", "correlation",
               "top_op_id")
# What the device nodes keep of their kernels row (attribution of path segments).
DEVICE_COLUMNS = ("kernel_id", "name", "kind", "rank", "device", "stream", "phase", "step", "generation", "module",
                  "layer", "op", "category", "library", "friendly_name")


@dataclass
class DependencyGraph:
    """Nodes 0…n_device-1 are device work (`devices`, one row each), the rest host nodes (`hosts`). Per node:
    start, end (ns), rank, `binding` (the node whose edge decided its start, -1 none), `edge` (its kind) and
    `anchor` (when that edge was satisfied). Per device node its candidate edges and observed lags; per host node
    its thread predecessor, host gap split, sync edge. `typical`: the lags (ns) the binding choice used."""

    devices: pl.DataFrame
    hosts: pl.DataFrame
    start: np.ndarray
    end: np.ndarray
    rank: np.ndarray
    binding: np.ndarray
    edge: np.ndarray
    anchor: np.ndarray
    stream_pred: np.ndarray  # per device node
    launch_pred: np.ndarray
    event_pred: np.ndarray
    event_edge: np.ndarray  # EVENT or INFERRED where event_pred >= 0
    collective_group: np.ndarray  # per device node: its collective instance across ranks, -1 none
    collective_last: np.ndarray  # per device node: the node of the last rank to enter its collective, -1 none
    communication: np.ndarray  # per device node: a collective
    thread_pred: np.ndarray  # per host node (indexes are node ids)
    gap_launch: np.ndarray  # per host node: ns of the host time before it inside launching CPU ops
    gap_host: np.ndarray  # per host node: ns of the host time before it outside them
    sync_pred: np.ndarray  # per host node: the device node its return waited for, -1 none
    call: np.ndarray  # per host node: a runtime call (False: a CPU op of a run without device activity)
    thread: np.ndarray  # per host node: a code of its (rank, pid, tid)
    launched_device: np.ndarray  # per host node: the first device node it launched, -1 none
    launching_ops: LaunchingOps  # outermost CPU ops that launched device work
    typical: dict[str, int]
    usual_lag: np.ndarray  # per device node: the typical lag of its binding edge's kind
    pinned: np.ndarray  # per device node: started later than anything recorded explains (held when re-timed)
    excess_edge: np.ndarray  # per device node: what the unexplained part waited for (EVENT: a wait call before it)
    retimed: bool = False  # times re-computed by analyze/paths/retime (host time no longer where the CPU ops were)

    @property
    def n_device(self) -> int:
        return self.devices.height

    def __len__(self) -> int:
        return len(self.start)


def dependency_graph(kernels: pl.DataFrame, calls: pl.DataFrame | None = None,
                     host_ops: pl.DataFrame | None = None, collectives: pl.DataFrame | None = None
                     ) -> DependencyGraph:
    """kernels: the run's kernels (attributed; catalog columns mark collectives); calls: calls.parquet; host_ops:
    the outermost CPU ops (depth 0) with op_id, name, rank, pid, tid, start_ns, dur_ns; collectives: the matched
    instances of analyze/ranks/communication (kernel_id, group, kind, seq)."""
    rules = knowledge.critical_path_rules()
    devices = _device_nodes(kernels)
    cpu_only = devices.height == 0 and kernels.height > 0 and bool((kernels["kind"] == CPU_OP).all())
    hosts, host_of = _host_nodes(devices, calls, host_ops if cpu_only else None)
    n_dev = devices.height
    start = np.concatenate([devices["start_ns"].to_numpy(), hosts["start_ns"].to_numpy()]).astype(np.int64)
    end = np.concatenate([devices["end_ns"].to_numpy(), hosts["end_ns"].to_numpy()]).astype(np.int64)
    rank = np.concatenate([devices["rank"].to_numpy(), hosts["rank"].to_numpy()]).astype(np.int64)
    span = int(end.max()) + 2 if len(end) else 2

    stream_pred = previous_in_group(devices["lane"].to_numpy())
    launch_pred = host_of.fill_null(-1).to_numpy().astype(np.int64)
    launch_pred = np.where(launch_pred >= 0, launch_pred + n_dev, -1)
    d_start, d_end = start[:n_dev], end[:n_dev]
    pred_end = np.where(stream_pred >= 0, d_end[np.maximum(stream_pred, 0)], np.iinfo(np.int64).min)
    call_start = np.where(launch_pred >= 0, start[np.maximum(launch_pred, 0)], np.iinfo(np.int64).min)
    typical = _typical_lags(d_start, pred_end, call_start, stream_pred, launch_pred, rules["lags"])

    thread = hosts["thread"].to_numpy().astype(np.int64)
    thread_pred = previous_in_group(thread)
    thread_pred = np.where(thread_pred >= 0, thread_pred + n_dev, -1)
    calls_api = hosts["api"].fill_null("")
    waits = calls_api.str.contains(_any(rules["calls"]["event_wait"])).to_numpy()
    evidence = _wait_evidence(hosts, waits, launch_pred, stream_pred, call_start, n_dev)
    event_pred, event_edge = _event_edges(devices, d_start, d_end, pred_end, call_start, evidence, typical,
                                          rules["lags"], span)
    collective_group, collective_last = _collectives(devices, collectives, d_start, d_end)
    binding, edge, anchor = _device_binding(d_start, d_end, pred_end, call_start, stream_pred, launch_pred,
                                            event_pred, event_edge, typical)
    # A start later than its binding edge and that edge's typical lag explain by more than inferred_unexplained:
    # the node waited for something the trace does not hold (work before the window, another process). Its start
    # is then held where it was when the graph is re-timed, and the excess is a wait on its path.
    usual = np.select([edge == STREAM, edge == LAUNCH, (edge == EVENT) | (edge == INFERRED)],
                      [typical["stream"], typical["launch"], typical["event"]], 0)
    pinned = (binding >= 0) & (d_start - anchor - usual > rules["lags"]["inferred_unexplained"])
    excess_edge = np.where(evidence, EVENT, UNEXPLAINED)

    blocking = calls_api.str.contains(_any(rules["calls"]["blocking"])).to_numpy() & hosts["call"].to_numpy()
    h_start, h_end = start[n_dev:], end[n_dev:]
    sync_pred = _sync_edges(rank[:n_dev], d_end, rank[n_dev:], h_start, h_end, blocking, span)
    launched_device = np.full(len(hosts), np.iinfo(np.int64).max, dtype=np.int64)
    has = launch_pred >= 0
    np.minimum.at(launched_device, launch_pred[has] - n_dev, np.flatnonzero(has))
    launched_device[launched_device == np.iinfo(np.int64).max] = -1
    ops = _launching_ops(kernels, host_ops, hosts)
    prev_end = np.where(thread_pred >= 0, end[np.maximum(thread_pred, 0)], h_start)
    gap_launch = covered_between(ops.merged, thread * ops.band + np.minimum(prev_end, h_start),
                                 thread * ops.band + h_start)
    gap_host = np.maximum(h_start - prev_end, 0) - gap_launch
    h_binding = np.where(thread_pred >= 0, thread_pred, -1)
    h_anchor = np.where(thread_pred >= 0, np.minimum(prev_end, h_start), h_start)
    return DependencyGraph(
        devices=devices.drop(*_BUILD_ONLY), hosts=hosts, start=start, end=end, rank=rank,
        binding=np.concatenate([binding, h_binding]),
        edge=np.concatenate([edge, np.where(h_binding >= 0, THREAD, NONE)]),
        anchor=np.concatenate([anchor, h_anchor]),
        stream_pred=stream_pred, launch_pred=launch_pred, event_pred=event_pred, event_edge=event_edge,
        collective_group=collective_group, collective_last=collective_last,
        communication=devices["communication"].to_numpy(),
        thread_pred=thread_pred, gap_launch=gap_launch, gap_host=gap_host, sync_pred=sync_pred, call=hosts["call"].to_numpy(),
        thread=thread, launched_device=launched_device, launching_ops=ops, typical=typical,
        usual_lag=usual, pinned=pinned, excess_edge=excess_edge)


def _any(patterns: list[str]) -> str:
    return "|".join(f"(?:{p})" for p in patterns) or "$^"


def _device_nodes(kernels: pl.DataFrame) -> pl.DataFrame:
    from kernelscope.analyze.ranks.communication import is_collective

    timed = kernels.filter(pl.col("kind").is_in(DEVICE_KINDS) & pl.col("start_ns").is_not_null())
    keep = [c for c in DEVICE_COLUMNS if c in timed.columns]
    nodes = timed.select(
        *keep, "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"), "pid", "tid", "launch_api",
        "launch_start_ns", "launch_dur_ns", "correlation", "top_op_id",
        is_collective().fill_null(False).alias("communication"),
    ).sort("rank", "device", "stream", "start_ns", "kernel_id")
    return nodes.with_columns(pl.struct("rank", "device", "stream").rank("dense").cast(pl.Int64).alias("lane"))


def _host_nodes(devices: pl.DataFrame, calls: pl.DataFrame | None, host_ops: pl.DataFrame | None
                ) -> tuple[pl.DataFrame, pl.Series]:
    """One row per launch call (the kernels of one CUDA-graph launch share it), per call of calls.parquet and, on
    runs without device activity, per outermost CPU op; sorted by thread and start (an enclosing call before
    the calls inside it), with `thread` codes. Also, per device node, the row of its launch call (null: none)."""
    key = ["rank", "pid", "tid", "launch_start_ns", "launch_api"]
    launched = (devices.filter(pl.col("launch_start_ns").is_not_null())
                .group_by(key).agg(pl.col("launch_dur_ns").max().fill_null(0))
                .select("rank", "pid", "tid", pl.col("launch_api").alias("api"),
                        pl.col("launch_start_ns").alias("start_ns"), pl.col("launch_dur_ns").alias("dur_ns"),
                        pl.lit(True).alias("launches"), pl.lit(True).alias("call")))
    parts = [launched]
    if calls is not None and calls.height:
        parts.append(calls.select("rank", "pid", "tid", "api", "start_ns", "dur_ns", pl.lit(False).alias("launches"),
                                  pl.lit(True).alias("call")))
    if host_ops is not None and host_ops.height:
        parts.append(host_ops.select(pl.col("rank") if "rank" in host_ops.columns else pl.lit(0).alias("rank"),
                                     "pid", "tid", pl.col("name").alias("api"), "start_ns", "dur_ns",
                                     pl.lit(False).alias("launches"), pl.lit(False).alias("call")))
    hosts = pl.concat([p.cast(_HOST_SCHEMA) for p in parts], how="vertical")
    hosts = hosts.with_columns(pl.col("dur_ns").fill_null(0).clip(lower_bound=0)).sort(
        "rank", "pid", "tid", "start_ns", "dur_ns", descending=[False, False, False, False, True])
    hosts = hosts.with_row_index("row").with_columns(
        pl.col("row").cast(pl.Int64), (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        pl.struct("rank", "pid", "tid").rank("dense").cast(pl.Int64).alias("thread"))
    rows = hosts.filter("launches").select(*key[:3], pl.col("start_ns").alias("launch_start_ns"),
                                           pl.col("api").alias("launch_api"), pl.col("row").alias("host"))
    host_of = devices.select(key).join(rows, on=key, how="left", maintain_order="left", nulls_equal=False)["host"]
    return hosts.drop("row"), host_of


_HOST_SCHEMA = {"rank": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "api": pl.String, "start_ns": pl.Int64,
                "dur_ns": pl.Int64, "launches": pl.Boolean, "call": pl.Boolean}


def _median(values: np.ndarray, defaults: dict, kind: str) -> int:
    values = values[values >= 0]
    if len(values) < defaults["min_cases"]:
        return int(defaults[kind])
    return min(int(np.median(values)), int(defaults["largest"]))


def _typical_lags(d_start: np.ndarray, pred_end: np.ndarray, call_start: np.ndarray, stream_pred: np.ndarray,
                  launch_pred: np.ndarray, defaults: dict) -> dict[str, int]:
    """Medians of the clear cases: a launch's lag where the stream was idle when the call began, a stream's lag
    where the kernel was queued behind its predecessor (launched well before that ended)."""
    has_launch = launch_pred >= 0
    launch_clear = has_launch & ((stream_pred < 0) | (pred_end < call_start))
    launch = _median((d_start - call_start)[launch_clear], defaults, "launch")
    queued = (stream_pred >= 0) & (~has_launch | (pred_end >= call_start + launch)) & (pred_end <= d_start)
    stream = _median((d_start - pred_end)[queued], defaults, "stream")
    event = stream if queued.sum() >= defaults["min_cases"] else int(defaults["event"])
    return {"launch": launch, "stream": stream, "event": event}


def _wait_evidence(hosts: pl.DataFrame, waits: np.ndarray, launch_pred: np.ndarray, stream_pred: np.ndarray,
                   call_start: np.ndarray, n_dev: int) -> np.ndarray:
    """Per device node: its thread called an event wait after the launch of its stream's previous work and at
    or before its own launch (the next launch on the stream waits for the event)."""
    if hosts.height == 0:
        return np.zeros(len(launch_pred), dtype=bool)
    wait_start = pl.Series(np.where(waits, hosts["start_ns"].to_numpy(), np.nan))
    last_wait = (pl.DataFrame({"t": hosts["thread"], "w": wait_start.fill_nan(None)})
                 .select(pl.col("w").forward_fill().over("t"))["w"].fill_null(-np.inf).to_numpy())
    mine = np.where(launch_pred >= 0, last_wait[np.maximum(launch_pred - n_dev, 0)], -np.inf)
    before = np.where(stream_pred >= 0, call_start[np.maximum(stream_pred, 0)], np.iinfo(np.int64).min)
    return (launch_pred >= 0) & (mine > before)


def _event_edges(devices: pl.DataFrame, d_start: np.ndarray, d_end: np.ndarray, pred_end: np.ndarray,
                 call_start: np.ndarray, evidence: np.ndarray, typical: dict[str, int], lags: dict, band: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    group = dense_codes(devices["rank"].to_numpy(), devices["device"].fill_null(-1).to_numpy())
    lane = devices["stream"].fill_null(-1).to_numpy()
    cand = latest_before(group, d_end, group, d_start, band, lane, lane)
    cand_end = np.where(cand >= 0, d_end[np.maximum(cand, 0)], np.iinfo(np.int64).min)
    explained = np.maximum(pred_end + typical["stream"], call_start + typical["launch"])
    late = cand_end > np.maximum(pred_end, call_start)
    event = (cand >= 0) & late & evidence & (d_start - cand_end <= lags["event_window"])
    inferred = ((cand >= 0) & late & ~evidence & (d_start - cand_end <= lags["inferred_window"])
                & (d_start - explained >= lags["inferred_unexplained"]))
    pred = np.where(event | inferred, cand, -1)
    return pred, np.where(event, EVENT, np.where(inferred, INFERRED, NONE))


def _device_binding(d_start: np.ndarray, d_end: np.ndarray, pred_end: np.ndarray, call_start: np.ndarray,
                    stream_pred: np.ndarray, launch_pred: np.ndarray, event_pred: np.ndarray,
                    event_edge: np.ndarray, typical: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edge whose anchor plus its typical lag is latest (ties: stream, then event, then launch)."""
    low = np.iinfo(np.int64).min // 4
    event_end = np.where(event_pred >= 0, d_end[np.maximum(event_pred, 0)], low)
    anchors = np.stack([np.where(stream_pred >= 0, pred_end, low), event_end,
                        np.where(launch_pred >= 0, call_start, low)])
    expected = anchors + np.array([[typical["stream"]], [typical["event"]], [typical["launch"]]])
    expected[anchors == low] = low
    choice = np.argmax(expected, axis=0)
    preds = np.stack([stream_pred, event_pred, launch_pred])
    cols = np.arange(len(d_start))
    binding = preds[choice, cols] if len(d_start) else np.zeros(0, dtype=np.int64)
    edge = np.array([STREAM, NONE, LAUNCH])[choice]
    edge = np.where(choice == 1, event_edge, edge)
    edge = np.where(binding >= 0, edge, NONE)
    anchor = np.where(binding >= 0, anchors[choice, cols] if len(d_start) else d_start, d_start)
    return binding.astype(np.int64), edge.astype(np.int64), anchor.astype(np.int64)


def _sync_edges(dev_rank: np.ndarray, d_end: np.ndarray, h_rank: np.ndarray, h_start: np.ndarray,
                h_end: np.ndarray, blocking: np.ndarray, band: int) -> np.ndarray:
    """Per host node: the device node of its rank that ended last while it was in progress, for blocking calls."""
    cand = latest_before(dev_rank, d_end, h_rank, h_end, band)
    ok = blocking & (cand >= 0)
    ok[ok] = d_end[cand[ok]] > h_start[ok]
    return np.where(ok, cand, -1)


def _launching_ops(kernels: pl.DataFrame, host_ops: pl.DataFrame | None, hosts: pl.DataFrame) -> LaunchingOps:
    """The outermost CPU ops that launched device work, on the threads of the host nodes."""
    band = int(max((hosts["end_ns"].max() or 0), 0)) + 2 if hosts.height else 2
    if host_ops is None or host_ops.height == 0 or hosts.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return LaunchingOps(empty, empty, pl.Series("name", [], dtype=pl.String), band)
    ops = host_ops if "rank" in host_ops.columns else host_ops.with_columns(pl.lit(0, pl.Int64).alias("rank"))
    band = max(band, int((ops["start_ns"] + ops["dur_ns"]).max() or 0) + 2)
    launching = kernels.select(pl.col("top_op_id").drop_nulls().unique().alias("op_id"))
    threads = hosts.select("rank", "pid", "tid", "thread").unique()
    ops = ops.join(launching, on="op_id", how="semi").join(threads, on=["rank", "pid", "tid"], how="inner")
    start = ops["thread"].to_numpy().astype(np.int64) * band + ops["start_ns"].to_numpy()
    order = np.argsort(start, kind="stable")
    start = start[order]
    names = ops["name"].cast(pl.String).gather(order)  # a column, not a Python string per op
    return LaunchingOps(start, start + ops["dur_ns"].to_numpy()[order], names, band)


@dataclass
class LaunchingOps:
    """Outermost CPU ops that launched device work: keys (thread code · band + time) of their starts (sorted) and
    ends, their names; `merged`: their union, for the time a stretch spends inside them."""

    starts: np.ndarray
    ends: np.ndarray
    names: pl.Series  # String, in the order of `starts`
    band: int

    def __post_init__(self) -> None:
        self.merged = merged_intervals(self.starts, self.ends)


def _collectives(devices: pl.DataFrame, collectives: pl.DataFrame | None, d_start: np.ndarray, d_end: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per device node of a collective matched across ranks: its instance (a code shared by the ranks' nodes of one
    collective, -1 none) and the node of the rank that entered it last, when that is another node and it entered
    before this one ended (-1 otherwise)."""
    group = np.full(devices.height, -1, dtype=np.int64)
    last_of = np.full(devices.height, -1, dtype=np.int64)
    if collectives is None or collectives.height == 0 or devices.height == 0:
        return group, last_of
    nodes = devices.select("kernel_id").with_row_index("node").join(
        collectives.select("kernel_id", "group", "kind", "seq"), on="kernel_id", how="inner")
    if nodes.height == 0:
        return group, last_of
    node = nodes["node"].to_numpy().astype(np.int64)
    nodes = nodes.with_columns(pl.Series("start", d_start[node]),
                               pl.struct("group", "kind", "seq").rank("dense").cast(pl.Int64).alias("instance"))
    last = nodes.select(pl.col("node").sort_by("start").last().over("instance"))["node"].to_numpy().astype(np.int64)
    ok = (last != node) & (d_start[last] > d_start[node]) & (d_start[last] < d_end[node])
    group[node] = nodes["instance"].to_numpy()
    last_of[node[ok]] = last[ok]
    return group, last_of
