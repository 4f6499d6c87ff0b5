"""The rows of critical_path.parquet from the walks of analyze/paths/critical_path: host time between calls cut into
time inside outermost CPU ops that launched device work (`launch`, named after that op) and the rest (`host`), every
segment named after its node.

Columnar throughout: the walks' segments stay integer arrays (class, what and edge as bytes) until the last step,
where each column of the table is one gather from a short list of strings (classes, kinds, edges) or from the
graph's own columns (names, modules, ops): no wide intermediate frame, no string per segment before the table's
own, no join or sort (a gap's pieces are laid where the gap was, so the rows stay in time order)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.paths.dependency_graph import EDGES, DependencyGraph
from kernelscope.analyze.paths.path_walk import (
    BETWEEN,
    BODY,
    CLASSES,
    CODE,
    GAP,
    HOST,
    LAUNCH_CLASS,
    UNRECORDED,
    Walk,
)
from kernelscope.contracts.tables import PATH_SEGMENT_COLUMNS

STEP_KEY = ["phase", "generation", "step"]
# What a segment's `kind` is, by code; codes from len(KINDS) on are the device node's own kind (its kernels row's).
KINDS = ("call", "none", "host", "unrecorded", "latency", "cpu_op")
CALL, NONE_KIND, HOST_KIND, UNRECORDED_KIND, LATENCY_KIND, CPU_OP_KIND = range(len(KINDS))


@dataclass
class Segments:
    """Every window's walk, one entry per segment in time order (window by window)."""

    node: np.ndarray  # -1: none
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # CODE
    what: np.ndarray  # CODE
    edge: np.ndarray  # CODE
    window: np.ndarray  # the window (row of the windows table) it belongs to
    name_row: np.ndarray  # the launching op (row of graph.launching_ops) a host piece lies in, -1 none


def concatenated(walks: list[Walk]) -> Segments:
    """The walks of windows 0, 1, … as one set of arrays (`name_row` all -1)."""
    if not walks:
        none = np.zeros(0, dtype=np.int64)
        code = np.zeros(0, dtype=CODE)
        return Segments(none, none, none, code, code, code, none.astype(np.int32), none)
    counts = [len(w.node) for w in walks]
    window = np.repeat(np.arange(len(walks), dtype=np.int32), counts)
    return Segments(*[np.concatenate([getattr(w, c) for w in walks]) for c in ("node", "start", "end")],
                    *[np.concatenate([getattr(w, c) for w in walks]).astype(CODE) for c in ("cls", "what", "edge")],
                    window, np.full(len(window), -1, dtype=np.int64))


def segment_table(graph: DependencyGraph, walks: list[Walk], windows: pl.DataFrame
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """critical_path.parquet's rows (PATH_SEGMENT_COLUMNS) of the walks of windows 0, 1, … (the list is emptied as
    they are taken in), their host gaps cut into pieces; and the path's length per window, rank and class (STEP_KEY,
    rank, class, dur_ns: a few rows per step, what the steps table is summed from)."""
    walked = concatenated(walks)
    walks.clear()
    cut = _cut_gaps(graph, walked)
    del walked
    rank = np.where(cut.node >= 0, graph.rank[np.maximum(cut.node, 0)], 0)
    lengths = _lengths(cut, rank, windows)
    return _named(graph, cut, rank, windows), lengths


def _lengths(s: Segments, rank: np.ndarray, windows: pl.DataFrame) -> pl.DataFrame:
    """The path's time per window, rank and class: the steps table's sums without grouping every segment by its
    step's strings."""
    summed = (pl.DataFrame({"_window": s.window, "rank": rank, "_cls": s.cls, "dur_ns": s.end - s.start},
                           schema={"_window": pl.Int32, "rank": pl.Int64, "_cls": pl.Int8, "dur_ns": pl.Int64})
              .group_by("_window", "rank", "_cls").agg(pl.col("dur_ns").sum()).sort("_window", "rank", "_cls"))
    window = summed["_window"].cast(pl.Int64).to_numpy()
    return summed.select(*[_pick(windows[c], window) for c in STEP_KEY], "rank",
                         pl.Series("class", CLASSES, dtype=pl.String).gather(summed["_cls"].cast(pl.Int64)),
                         "dur_ns")


@dataclass
class _Pieces:
    row: np.ndarray  # the gap each piece comes from (pieces sorted by gap, then time)
    start: np.ndarray
    end: np.ndarray
    inside: np.ndarray  # inside an outermost CPU op that launched device work
    name_row: np.ndarray  # that op (row of graph.launching_ops), -1 outside one


def _cut_gaps(graph: DependencyGraph, s: Segments) -> Segments:
    """`s` with each gap (host time between calls) replaced, in place, by its pieces: the rows keep their order,
    and a gap's pieces, in time order, fill the span it held."""
    gap = s.cls == GAP
    gaps = np.flatnonzero(gap)
    node = s.node[gaps]
    thread = (graph.thread[np.maximum(node - graph.n_device, 0)] if len(graph.thread) else
              np.zeros(len(gaps), dtype=np.int64))
    thread = np.where(node >= graph.n_device, thread, 0)
    pieces = _gap_pieces(graph, node, thread, s.start[gaps], s.end[gaps])
    del node, thread
    # Rows each entry becomes: 1, or its gap's piece count; every row lands at the running sum before it.
    per_gap = np.bincount(pieces.row, minlength=len(gaps))
    width = np.ones(len(gap), dtype=np.int64)
    width[gaps] = per_gap
    at = np.cumsum(width) - width
    total = int(width.sum()) if len(width) else 0
    del width
    kept = np.flatnonzero(~gap)
    first_piece = np.cumsum(per_gap) - per_gap
    piece_at = at[gaps[pieces.row]] + (np.arange(len(pieces.row)) - first_piece[pieces.row])
    del per_gap, first_piece
    owner = gaps[pieces.row]  # each piece's gap entry

    def laid(column: np.ndarray, of_pieces: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(total, dtype=column.dtype)
        out[at[kept]] = column[kept]
        out[piece_at] = column[owner] if of_pieces is None else of_pieces
        return out

    cls = np.where(pieces.inside, LAUNCH_CLASS, HOST).astype(CODE)
    name_row = np.full(total, -1, dtype=np.int64)
    name_row[piece_at] = pieces.name_row
    out = Segments(node=laid(s.node), start=laid(s.start, pieces.start), end=laid(s.end, pieces.end),
                   cls=laid(s.cls, cls), what=laid(s.what), edge=laid(s.edge), window=laid(s.window),
                   name_row=name_row)
    if not _in_order(out.window, out.start):  # segments that do not tile their window: ordered as before
        order = np.lexsort((out.start, out.window))
        out = Segments(*[getattr(out, f)[order] for f in Segments.__dataclass_fields__])
    return out


def _in_order(window: np.ndarray, start: np.ndarray) -> bool:
    """Rows sorted by window, then strictly by start (a window's segments tile it: no two start together)."""
    if len(window) < 2:
        return True
    same = window[1:] == window[:-1]
    return bool(np.all((window[1:] > window[:-1]) | (same & (start[1:] > start[:-1]))))


def _gap_pieces(graph: DependencyGraph, node: np.ndarray, thread: np.ndarray, a: np.ndarray, b: np.ndarray
                ) -> _Pieces:
    """Each gap [a, b) before host `node` on its thread cut where the launching ops' union begins and ends; on a
    re-timed graph (the CPU ops' times no longer apply) into its launch share, then the rest."""
    if graph.retimed:
        return _retimed_pieces(graph, node, a, b)
    ops = graph.launching_ops
    band = thread * ops.band
    starts, ends, _ = ops.merged
    lo, hi = band + a, band + b
    first = np.searchsorted(ends, lo, side="right")  # the merged intervals each gap meets: [first, last)
    last = np.searchsorted(starts, hi, side="left")
    count = np.maximum(last - first, 0)
    del last
    # Boundaries of each gap: its ends and every start and end of the intervals it meets, clipped to it.
    row = np.repeat(np.arange(len(a)), count)
    offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    j = np.repeat(first, count) + offset
    del offset, first, count
    inner = np.concatenate([np.clip(starts[j], lo[row], hi[row]), np.clip(ends[j], lo[row], hi[row])]) if len(j) \
        else np.zeros(0, dtype=np.int64)
    del j
    cut_row = np.concatenate([np.arange(len(a)), np.arange(len(a)), np.concatenate([row, row])])
    del row
    cut_at = np.concatenate([lo, hi, inner])
    del inner, lo, hi
    order = np.lexsort((cut_at, cut_row))
    cut_row, cut_at = cut_row[order], cut_at[order]
    del order
    same = cut_row[1:] == cut_row[:-1]
    p_row, p_lo, p_hi = cut_row[:-1][same], cut_at[:-1][same], cut_at[1:][same]
    del cut_row, cut_at, same
    real = p_hi > p_lo
    p_row, p_lo, p_hi = p_row[real], p_lo[real], p_hi[real]
    k = np.searchsorted(starts, p_lo, side="right") - 1
    inside = (k >= 0) & (ends[np.maximum(k, 0)] > p_lo) if len(starts) else np.zeros(len(p_lo), dtype=bool)
    name_row = np.searchsorted(ops.starts, p_lo, side="right") - 1
    named = inside & (name_row >= 0)
    named[named] = ops.ends[name_row[named]] > p_lo[named]
    name_row = np.where(named, name_row, -1)
    shift = band[p_row]
    return _Pieces(row=p_row, start=p_lo - shift, end=p_hi - shift, inside=inside, name_row=name_row)


def _retimed_pieces(graph: DependencyGraph, node: np.ndarray, a: np.ndarray, b: np.ndarray) -> _Pieces:
    """Re-timed gaps: each one's launch share (the share of its time inside launching ops before), then the rest."""
    h = node - graph.n_device
    whole = (graph.gap_launch[h] + graph.gap_host[h]).astype(np.float64)
    share = np.divide(graph.gap_launch[h], whole, out=np.zeros(len(h)), where=whole > 0)
    mid = a + np.rint((b - a) * np.clip(share, 0.0, 1.0)).astype(np.int64)
    rows = np.arange(len(a))
    row = np.concatenate([rows, rows])
    lo, hi = np.concatenate([a, mid]), np.concatenate([mid, b])
    inside = np.concatenate([np.ones(len(a), dtype=bool), np.zeros(len(a), dtype=bool)])
    real = hi > lo
    order = np.lexsort((lo[real], row[real]))
    return _Pieces(row=row[real][order], start=lo[real][order], end=hi[real][order], inside=inside[real][order],
                   name_row=np.full(int(real.sum()), -1, dtype=np.int64))


def _pick(column: pl.Series, rows: np.ndarray) -> pl.Series:
    """column[rows], null where a row is negative (one gather: the null is a row appended to the column)."""
    return column.extend_constant(None, 1).gather(np.where(rows >= 0, rows, len(column)))


def _named(graph: DependencyGraph, s: Segments, rank: np.ndarray, windows: pl.DataFrame) -> pl.DataFrame:
    """Step, rank, kernel or op, module, layer of each segment: a device node's own kernel; a host node's call, with
    the module and layer of the first kernel it launched (host time before a call: the call's). The table's columns
    are made one at a time, each segment array let go once the last column that needs it is made."""
    n_dev = graph.n_device
    dev, hosts = graph.devices, graph.hosts
    columns = [*[_pick(windows[c], s.window.astype(np.int64)) for c in STEP_KEY],
               pl.Series("rank", rank, dtype=pl.Int64), pl.Series("start_ns", s.start, dtype=pl.Int64),
               pl.Series("dur_ns", s.end - s.start, dtype=pl.Int64),
               pl.Series("class", CLASSES, dtype=pl.String).gather(s.cls.astype(np.int64)).alias("class"),
               pl.Series("edge", [None if e == "none" else e for e in EDGES], dtype=pl.String).gather(
                   s.edge.astype(np.int64)).alias("edge")]
    node, what, name_row = s.node, s.what, s.name_row
    s.window = s.start = s.end = s.cls = s.edge = s.node = s.what = s.name_row = None  # taken: let go as used
    own_device = (node >= 0) & (node < n_dev)
    host = np.where(node >= n_dev, node - n_dev, -1)
    columns.append(_pick(hosts["tid"], host).alias("tid"))
    body = what == BODY
    cpu_op = ~graph.call[np.maximum(host, 0)] if hosts.height else np.zeros(len(node), dtype=bool)
    # kind: a body is its device node's kind, `cpu_op` or `call` (or `none` without a node); the rest by what it is.
    kind = np.select([body & own_device, body & (host >= 0) & cpu_op, body & (host >= 0), body,
                      what == BETWEEN, what == UNRECORDED],
                     [len(KINDS) + node, CPU_OP_KIND, CALL, NONE_KIND, HOST_KIND, UNRECORDED_KIND], LATENCY_KIND)
    del cpu_op, body
    columns.append(_pick(pl.concat([pl.Series(KINDS, dtype=pl.String), dev["kind"].cast(pl.String)]), kind)
                   .alias("kind"))
    del kind
    # name: a device node's own; host time between calls: the launching op it lies in; else the call's.
    n_ops = len(graph.launching_ops.names)
    between = (what == BETWEEN) & (host >= 0)
    name = np.where(own_device, node, np.where(between, np.where(name_row >= 0, n_dev + name_row, -1),
                                               np.where(host >= 0, n_dev + n_ops + host, -1)))
    del between, name_row
    names = pl.concat([dev["name"].cast(pl.String), graph.launching_ops.names.cast(pl.String),
                       hosts["api"].cast(pl.String)])
    columns.append(_pick(names, name).alias("name"))
    del names, name
    own = np.where(own_device, node, -1)
    columns += [_pick(dev["kernel_id"], own).alias("kernel_id"), _pick(dev["stream"], own).alias("stream")]
    del own
    launched = (np.where(host >= 0, graph.launched_device[np.maximum(host, 0)], -1) if hosts.height
                else np.full(len(node), -1, dtype=np.int64))
    device = np.where(own_device, node, launched)  # whose attribution a segment carries
    del launched, host, node, own_device
    columns += [_pick(dev["module"], device).alias("module"), _pick(dev["layer"], device).alias("layer"),
                _pick(dev["op"], np.where(what != BETWEEN, device, -1)).alias("op")]
    return pl.DataFrame(columns).select(list(PATH_SEGMENT_COLUMNS)).cast(PATH_SEGMENT_COLUMNS)
