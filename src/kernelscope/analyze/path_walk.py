"""The critical path through a dependency graph (analyze/dependency_graph), walked back from the end of a window to
its start: at each node the edge that decided its start (its binding edge) leads to the next, so the segments the
walk emits tile the window exactly (each nanosecond of it once)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelscope.analyze.dependency_graph import COLLECTIVE, LAUNCH, NONE, SYNC, DependencyGraph

CLASSES = ("compute", "communication", "wait", "launch", "host")
COMPUTE, COMMUNICATION, WAIT, LAUNCH_CLASS, HOST = range(len(CLASSES))
GAP = len(CLASSES)  # host time between calls: split into launch and host pieces afterwards
# What a segment is: the body of a node, the lag after an edge (latency), host time between two calls, time
# before anything the path could follow was recorded (a rank that started later than the step's first rank).
BODY, LATENCY, BETWEEN, UNRECORDED = range(4)


@dataclass
class Walk:
    """Segments in time order: node (-1: none), start and end (ns), class, what it is, the edge it belongs to."""

    node: list[int]
    start: list[int]
    end: list[int]
    cls: list[int]
    what: list[int]
    edge: list[int]


def walk(graph: DependencyGraph, end_node: int, t_start: int, t_end: int) -> Walk:
    """The path from `t_end` (the end of `end_node`'s work, or later) back to `t_start`."""
    out = Walk([], [], [], [], [], [])

    def emit(node: int, a: int, b: int, cls: int, what: int, edge: int) -> None:
        a = max(a, t_start)
        if b > a:
            for column, value in zip((out.node, out.start, out.end, out.cls, out.what, out.edge),
                                     (node, a, b, cls, what, edge), strict=True):
                column.append(value)

    n_dev = graph.n_device
    start, end, binding, anchor, edge = graph.start, graph.end, graph.binding, graph.anchor, graph.edge
    t, n = t_end, end_node
    budget = 4 * len(graph) + 16  # every hop moves back in time or to an earlier node: this is never reached
    while t > t_start and budget > 0:
        budget -= 1
        if n < 0:
            emit(-1, t_start, t, HOST, UNRECORDED, NONE)  # nothing recorded before this point
            break
        if n < n_dev:
            t, n = _device_step(graph, n, t, emit)
            continue
        h = n - n_dev
        sync = graph.sync_pred[h]
        if sync >= 0 and t >= end[n] > start[n]:
            emit(n, end[sync], min(t, end[n]), WAIT, LATENCY, SYNC)  # the call returned after the work it waited for
            t, n = min(t, int(end[sync])), int(sync)
            continue
        emit(n, start[n], min(t, end[n]), LAUNCH_CLASS if graph.call[h] else HOST, BODY, NONE)
        t = min(t, int(start[n]))
        if binding[n] < 0:
            emit(n, t_start, t, HOST, UNRECORDED, NONE)  # before the thread's first recorded work
            t = t_start
            break
        emit(n, anchor[n], t, GAP, BETWEEN, edge[n])
        t, n = min(t, int(anchor[n])), int(binding[n])
    if t > t_start:
        emit(-1, t_start, t, HOST, UNRECORDED, NONE)
    for column in (out.node, out.start, out.end, out.cls, out.what, out.edge):
        column.reverse()
    return out


def _device_step(graph: DependencyGraph, n: int, t: int, emit) -> tuple[int, int]:
    """Emit a device node's work up to `t` and the lag before it; the time and node the walk goes on from."""
    s, e = int(graph.start[n]), int(graph.end[n])
    last = int(graph.collective_last[n])
    ready = max(s, int(graph.start[last])) if last >= 0 else s
    body = COMMUNICATION if graph.communication[n] else COMPUTE
    emit(n, ready, min(t, e), body, BODY, COLLECTIVE if ready > s else NONE)
    if ready > s:  # the data moved once the last rank entered: the path goes on on that rank
        return min(t, ready), last
    t = min(t, s)
    p, a, kind = int(graph.binding[n]), int(graph.anchor[n]), int(graph.edge[n])
    if p < 0:
        emit(n, _BEFORE_ALL, t, WAIT, LATENCY, NONE)  # nothing recorded explains its start: to the window's start
        return _BEFORE_ALL, -1
    if graph.pinned[n]:  # the part beyond its edge's usual lag waited for something the trace does not hold
        usual_end = a + int(graph.usual_lag[n])
        emit(n, usual_end, t, WAIT, LATENCY, int(graph.excess_edge[n]))
        t = min(t, usual_end)
    emit(n, a, t, LAUNCH_CLASS if kind == LAUNCH else WAIT, LATENCY, kind)
    return min(t, a), p


_BEFORE_ALL = -(2**62)
