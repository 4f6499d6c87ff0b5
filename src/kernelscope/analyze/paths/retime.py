"""Re-timing a dependency graph (analyze/paths/dependency_graph) when some work gets faster or slower: what
`kernelscope whatif RUN --speedup TARGET=FACTOR` computes (docs/whatif.md, "What shortening buys").

Every node starts as soon as all its edges allow, in the order the trace saw them: a device node at the latest of
(its stream's previous work's end, its launch call's start, the work of another stream it waited for) plus each
edge's lag; a host call after the previous call on its thread plus the host time between them; a blocking call
returns after the device work it waited for; a collective moves data once every rank has entered it. Lags are as
observed on the edge that decided a start, and at most their typical value on the others, so that with no change
at all every node keeps its time exactly (tested). A node that waited for something the trace does not hold (a
start that nothing recorded explains, the first work of a thread) keeps its time. A speedup divides durations:
a kernel's or a module's device work, or everything of a class (compute and communication: device work; launch:
launch calls, launch latencies and host time inside launching CPU ops; host: the other host time; wait: the lags
of stream, event and sync edges)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np
import polars as pl

from kernelscope.analyze.paths.dependency_graph import EVENT, INFERRED, LAUNCH, NONE, STREAM, DependencyGraph
from kernelscope.analyze.paths.path_walk import CLASSES
from kernelscope.load import knowledge

_DEVICE_TEXT = ("name", "friendly_name")


@dataclass(frozen=True)
class Speedup:
    """TARGET=FACTOR: the target's time divided by `factor` (2: twice as fast; 0.5: twice as slow)."""

    target: str
    factor: float


@dataclass
class Factors:
    """What divides each duration: per device node (kernels and modules named), per class."""

    device: np.ndarray
    classes: dict[str, float]
    matched: dict[str, int]  # target → device nodes it names (a class: -1)


def speedup_factors(graph: DependencyGraph, speedups: list[Speedup]) -> Factors:
    """The factors of `speedups`, in order (a later one multiplies an earlier one's where both apply). A target is a
    class (compute, communication, wait, launch, host), else a kernel (its name as the trace gives it, or its
    catalog label) or a module (its qualified name, or any module inside it); `*` and `?` match any text. A
    target that names nothing raises ValueError."""
    device = np.ones(graph.n_device, dtype=np.float64)
    classes = dict.fromkeys(CLASSES, 1.0)
    matched: dict[str, int] = {}
    for speedup in speedups:
        if speedup.target in classes:
            classes[speedup.target] *= speedup.factor
            matched[speedup.target] = -1
            continue
        mask = _device_mask(graph.devices, speedup.target)
        if not mask.any():
            raise ValueError(f"{speedup.target!r} names no kernel, module or class of the run")
        device[mask] *= speedup.factor
        matched[speedup.target] = int(mask.sum())
    return Factors(device=device, classes=classes, matched=matched)


def _device_mask(devices: pl.DataFrame, target: str) -> np.ndarray:
    pattern = any(c in target for c in "*?[")
    mask = np.zeros(devices.height, dtype=bool)
    for column in (*_DEVICE_TEXT, "module"):
        if column not in devices.columns:
            continue
        values = devices[column].cast(pl.String)
        if pattern:
            distinct = [v for v in values.unique().drop_nulls().to_list() if fnmatchcase(v, target)]
            mask |= values.is_in(distinct).fill_null(False).to_numpy()
        elif column == "module":
            mask |= ((values == target) | values.str.starts_with(target + ".")).fill_null(False).to_numpy()
        else:
            mask |= (values == target).fill_null(False).to_numpy()
    return mask


def retime(graph: DependencyGraph, factors: Factors) -> DependencyGraph:
    """The graph with every node's new start and end, and for each node the edge that decides it now."""
    n_dev = graph.n_device
    start, end = graph.start.tolist(), graph.end.tolist()
    new_start, new_end = list(start), list(end)
    binding, edge, anchor = graph.binding.tolist(), graph.edge.tolist(), graph.anchor.tolist()
    pinned = graph.pinned.tolist()
    sync_pred = graph.sync_pred.tolist()
    f = factors.classes
    unexplained = knowledge.critical_path_rules()["lags"]["inferred_unexplained"]
    lags = _lags(graph)
    _scaled_lags(lags, graph, f, unexplained)
    members = _instances(graph)
    body = _bodies(graph, factors)
    gap_launch, gap_host = graph.gap_launch / f["launch"], graph.gap_host / f["host"]
    gap = (gap_launch + gap_host).tolist()
    base = _sync_base(graph)
    for kind, n in _events(graph):
        if kind == 3:  # a device node's start
            best, best_edge, best_anchor = -(2**62), NONE, start[n]
            for pred, code, lag in lags[n]:
                if pred < 0:
                    continue
                known = new_start[pred] if code == LAUNCH else new_end[pred]
                observed = start[pred] if code == LAUNCH else end[pred]
                if observed > start[n]:  # its anchor comes later in the trace (overlapping work): from its start
                    known, lag = new_start[pred], start[n] - start[pred]
                if known + lag > best:
                    best, best_edge, best_anchor, binding[n] = known + lag, code, known, pred
            if best_edge == NONE:  # nothing recorded came before it: it keeps its time
                best, binding[n] = start[n], -1
            new_start[n], edge[n], anchor[n] = best, best_edge, best_anchor
            pinned[n] = best_edge != NONE and best - best_anchor - _usual(graph, best_edge) > unexplained
        elif kind == 0:  # a device node's end
            ready = new_start[n]
            for other in members.get(n, ()):
                ready = max(ready, new_start[other])
            new_end[n] = ready + body[n]
        elif kind == 2:  # a host node's start
            pred = graph.binding[n]
            if pred < 0:
                continue  # the thread's first recorded work keeps its time
            if start[n] < end[pred]:  # a call inside a call
                new_start[n] = new_start[pred] + (start[n] - start[pred])
                anchor[n] = new_start[n]
            else:
                new_start[n] = new_end[pred] + gap[n - n_dev]
                anchor[n] = new_end[pred]
        else:  # a host node's end
            h = n - n_dev
            own = new_start[n] + body[n]
            d = graph.sync_pred[h]
            if d >= 0:
                waited = new_end[d] + (end[n] - end[d]) / f["wait"]
                own = max(new_start[n] + min(body[n], base), waited)
                sync_pred[h] = d if waited >= own else -1
            new_end[n] = own
    retimed = _with_times(graph, new_start, new_end, binding, edge, anchor, pinned, sync_pred, members)
    return dataclasses.replace(retimed, gap_launch=gap_launch, gap_host=gap_host)


def _events(graph: DependencyGraph) -> list[tuple[int, int]]:
    """(kind, node) in the order the trace saw them: at one time, device ends (0), host ends (1), host starts (2),
    device starts (3), so that every edge's anchor comes before what it decides."""
    n_dev = graph.n_device
    nodes = np.arange(len(graph), dtype=np.int64)
    device = nodes < n_dev
    times = np.concatenate([graph.end, graph.start])
    kinds = np.concatenate([np.where(device, 0, 1), np.where(device, 3, 2)])
    order = np.lexsort((np.concatenate([nodes, nodes]), kinds, times))
    return list(zip(kinds[order].tolist(), np.concatenate([nodes, nodes])[order].tolist(), strict=True))


def _lags(graph: DependencyGraph) -> list[list[tuple[int, int, float]]]:
    """Per device node its edges (predecessor, kind, lag): observed on the binding edge, at most typical on the
    others; launch lags divided by the launch factor, the others by the wait factor (at _bodies' time)."""
    typical = graph.typical
    out: list[list[tuple[int, int, float]]] = []
    start, end = graph.start, graph.end
    for n in range(graph.n_device):
        edges = []
        for pred, code, usual in ((graph.stream_pred[n], STREAM, typical["stream"]),
                                  (graph.launch_pred[n], LAUNCH, typical["launch"]),
                                  (graph.event_pred[n], graph.event_edge[n], typical["event"])):
            if pred < 0:
                continue
            anchor = start[pred] if code == LAUNCH else end[pred]
            observed = int(start[n] - anchor)
            lag = observed if pred == graph.binding[n] else min(observed, usual)
            edges.append((int(pred), int(code), float(lag)))
        out.append(edges)
    return out


def _scaled_lags(lags: list[list[tuple[int, int, float]]], graph: DependencyGraph, classes: dict[str, float],
                 unexplained: int) -> None:
    """Lags divided by their class's factor (launch or wait); of a lag longer than its kind's usual one by more
    than the trace explains (a wait for something it does not hold), only the usual part."""
    for edges in lags:
        for i, (pred, code, lag) in enumerate(edges):
            if lag <= 0:
                continue
            usual = _usual(graph, code)
            factor = classes["launch"] if code == LAUNCH else classes["wait"]
            part = usual if lag - usual > unexplained else lag
            edges[i] = (pred, code, part / factor + (lag - part))


def _usual(graph: DependencyGraph, code: int) -> int:
    typical = graph.typical
    return {STREAM: typical["stream"], LAUNCH: typical["launch"], EVENT: typical["event"],
            INFERRED: typical["event"]}.get(code, 0)


def _bodies(graph: DependencyGraph, factors: Factors) -> list[float]:
    """Each node's own time once divided: device work (a collective's: its data movement), host calls and ops."""
    f = factors.classes
    n_dev = graph.n_device
    dur = (graph.end - graph.start).astype(np.float64)
    device = dur[:n_dev].copy()
    last = graph.collective_last
    ready = np.where(last >= 0, np.maximum(graph.start[:n_dev], graph.start[np.maximum(last, 0)]), graph.start[:n_dev])
    device = np.where(last >= 0, graph.end[:n_dev] - ready, device)
    device /= factors.device * np.where(graph.communication, f["communication"], f["compute"])
    host = dur[n_dev:] / np.where(graph.call, f["launch"], f["host"])
    return np.concatenate([device, host]).tolist()


def _sync_base(graph: DependencyGraph) -> float:
    """The time a blocking call takes when it has nothing to wait for: the median of the other calls."""
    n_dev = graph.n_device
    free = (graph.sync_pred < 0) & graph.call
    durations = (graph.end[n_dev:] - graph.start[n_dev:])[free]
    return float(np.median(durations)) if len(durations) else 0.0


def _instances(graph: DependencyGraph) -> dict[int, list[int]]:
    """Per collective node: the nodes of the other ranks in its instance that entered before it ended."""
    group = graph.collective_group
    out: dict[int, list[int]] = {}
    if not (group >= 0).any():
        return out
    by_group: dict[int, list[int]] = {}
    for node in np.flatnonzero(group >= 0).tolist():
        by_group.setdefault(int(group[node]), []).append(node)
    for nodes in by_group.values():
        for node in nodes:
            out[node] = [o for o in nodes if o != node and graph.start[o] < graph.end[node]]
    return out


def _with_times(graph: DependencyGraph, new_start: list, new_end: list, binding: list, edge: list, anchor: list,
                pinned: list, sync_pred: list, members: dict[int, list[int]]) -> DependencyGraph:
    start = np.rint(np.asarray(new_start, dtype=np.float64)).astype(np.int64)
    end = np.maximum(np.rint(np.asarray(new_end, dtype=np.float64)).astype(np.int64), start)
    last = np.full(graph.n_device, -1, dtype=np.int64)
    for node, others in members.items():
        if others:
            latest = max(others, key=lambda o: start[o])
            if start[latest] > start[node]:
                last[node] = latest
    edges = np.asarray(edge, dtype=np.int64)
    typical = graph.typical
    usual = np.select([edges[:graph.n_device] == STREAM, edges[:graph.n_device] == LAUNCH,
                       (edges[:graph.n_device] == EVENT) | (edges[:graph.n_device] == INFERRED)],
                      [typical["stream"], typical["launch"], typical["event"]], 0)
    return dataclasses.replace(
        graph, start=start, end=end, binding=np.asarray(binding, dtype=np.int64), edge=edges,
        anchor=np.rint(np.asarray(anchor, dtype=np.float64)).astype(np.int64), usual_lag=usual,
        pinned=np.asarray(pinned, dtype=bool), sync_pred=np.asarray(sync_pred, dtype=np.int64),
        collective_last=last, retimed=True)
