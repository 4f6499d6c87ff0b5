"""The critical path through a dependency graph (analyze/paths/dependency_graph), walked back from the end of a window to
its start: at each node the edge that decided its start (its binding edge) leads to the next, so the segments the
walk emits tile the window exactly (each nanosecond of it once).

The walk is a chain of states: a device node, or a host node entered at its end (where a blocking call's return
leads to the device work it waited for) or at its start (from a kernel it launched). Each state's successor, the
time the walk leaves it (`exit`) and the segments it holds (at most three, each up to the time the walk entered
it) are arrays computed once for the whole graph; a window's walk only chases successors, and its segments are
cut from those arrays at once (the entry times are running minima of the exits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernelscope.analyze.paths.dependency_graph import COLLECTIVE, LAUNCH, NONE, SYNC, DependencyGraph

CLASSES = ("compute", "communication", "wait", "launch", "host")
COMPUTE, COMMUNICATION, WAIT, LAUNCH_CLASS, HOST = range(len(CLASSES))
GAP = len(CLASSES)  # host time between calls: split into launch and host pieces afterwards
# What a segment is: the body of a node, the lag after an edge (latency), host time between two calls, time
# before anything the path could follow was recorded (a rank that started later than the step's first rank).
BODY, LATENCY, BETWEEN, UNRECORDED = range(4)
SLOTS = 3  # segments a state holds at most
CODE = np.int8  # class, what and edge codes: a few values each (a byte, not eight, per segment and slot)
_NEVER = -(2**62)


@dataclass
class States:
    """Per state: its node, successor (-1: the walk ends), exit time, and SLOTS segments (lo, hi: -1 where
    empty; cls, what, edge). States 0…len(graph)-1: each node (a host node entered at its end); then each host
    node entered at its start."""

    node: np.ndarray
    succ: np.ndarray
    exit: np.ndarray
    lo: np.ndarray  # (states, SLOTS)
    hi: np.ndarray
    cls: np.ndarray
    what: np.ndarray
    edge: np.ndarray


@dataclass
class Walk:
    """Segments in time order: node (-1: none), start and end (ns), class, what it is, the edge it belongs to (the
    last three as CODE)."""

    node: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray
    what: np.ndarray
    edge: np.ndarray


def states(graph: DependencyGraph) -> States:
    n_dev, n = graph.n_device, len(graph)
    n_host = n - n_dev
    count = n + n_host
    out = States(node=np.concatenate([np.arange(n), np.arange(n_dev, n)]).astype(np.int64),
                 succ=np.full(count, -1, dtype=np.int64), exit=np.full(count, _NEVER, dtype=np.int64),
                 lo=np.full((count, SLOTS), 0, dtype=np.int64), hi=np.full((count, SLOTS), -1, dtype=np.int64),
                 cls=np.zeros((count, SLOTS), dtype=CODE), what=np.zeros((count, SLOTS), dtype=CODE),
                 edge=np.zeros((count, SLOTS), dtype=CODE))
    _device_states(graph, out)
    _host_states(graph, out)
    return out


def _device_states(graph: DependencyGraph, out: States) -> None:
    d = np.arange(graph.n_device)
    if len(d) == 0:
        return
    s, e = graph.start[d], graph.end[d]
    last = graph.collective_last
    ready = np.where(last >= 0, np.maximum(s, graph.start[np.maximum(last, 0)]), s)
    jump = ready > s  # the data moved once the last rank entered: the path goes on on that rank
    _slot(out, d, 0, ready, e, np.where(graph.communication, COMMUNICATION, COMPUTE), BODY,
          np.where(jump, COLLECTIVE, NONE))
    p, a, kind = graph.binding[d], graph.anchor[d], graph.edge[d]
    usual_end = a + graph.usual_lag
    pinned = ~jump & (p >= 0) & graph.pinned
    # The part beyond its edge's usual lag waited for something the trace does not hold.
    _slot(out, d[pinned], 1, usual_end[pinned], s[pinned], WAIT, LATENCY, graph.excess_edge[pinned])
    lag_hi = np.where(pinned, np.minimum(s, usual_end), s)
    linked = ~jump & (p >= 0)
    _slot(out, d[linked], 2, a[linked], lag_hi[linked], np.where(kind[linked] == LAUNCH, LAUNCH_CLASS, WAIT), LATENCY,
          kind[linked])
    unexplained = ~jump & (p < 0)  # nothing recorded explains its start: a wait back to the window's start
    _slot(out, d[unexplained], 2, np.full(unexplained.sum(), _NEVER), s[unexplained], WAIT, LATENCY, NONE)
    n_host = len(graph) - graph.n_device
    # A kernel's launch call is entered at its start (its return never waited for this kernel).
    launched = np.where(kind == LAUNCH, p + n_host, p)
    out.succ[d] = np.where(jump, last, np.where(p >= 0, launched, -1))
    out.exit[d] = np.where(jump, ready, np.where(p >= 0, np.minimum(s, a), _NEVER))


def _host_states(graph: DependencyGraph, out: States) -> None:
    n_dev, n = graph.n_device, len(graph)
    n_host = n - n_dev
    if n_host == 0:
        return
    nodes = np.arange(n_dev, n)
    h = nodes - n_dev
    hs, he = graph.start[nodes], graph.end[nodes]
    pred, anchor = graph.binding[nodes], graph.anchor[nodes]
    # The previous call is entered at its end unless this call ran inside it.
    pred_state = np.where(pred >= 0, np.where(hs >= graph.end[np.maximum(pred, 0)], pred, pred + n_host), -1)
    body_cls = np.where(graph.call, LAUNCH_CLASS, HOST)
    for states_of, at_end in ((nodes, True), (nodes + n_host, False)):
        sync = graph.sync_pred[h] if at_end else np.full(n_host, -1)
        waits = (sync >= 0) & (he > hs)
        plain = ~waits
        # A blocking call returned after the device work it waited for.
        _slot(out, states_of[waits], 0, graph.end[sync[waits]], he[waits], WAIT, LATENCY, SYNC)
        _slot(out, states_of[plain], 0, hs[plain], he[plain], body_cls[plain], BODY, NONE)
        first = plain & (pred < 0)  # before the thread's first recorded work
        _slot(out, states_of[first], 1, np.full(first.sum(), _NEVER), hs[first], HOST, UNRECORDED, NONE)
        linked = plain & (pred >= 0)
        _slot(out, states_of[linked], 1, anchor[linked], hs[linked], GAP, BETWEEN, graph.edge[nodes][linked])
        out.succ[states_of] = np.where(waits, sync, np.where(pred >= 0, pred_state, -1))
        out.exit[states_of] = np.where(waits, graph.end[np.maximum(sync, 0)], np.where(pred >= 0, anchor, _NEVER))


def _slot(out: States, rows: np.ndarray, slot: int, lo, hi, cls, what, edge) -> None:
    out.lo[rows, slot] = lo
    out.hi[rows, slot] = hi
    out.cls[rows, slot] = cls
    out.what[rows, slot] = what
    out.edge[rows, slot] = edge


def chase(table: States, start_state: int, t_start: int) -> np.ndarray:
    """The states of one window's walk, from `start_state` until one is left at or before `t_start`."""
    succ, exit_time = table.succ, table.exit
    seen: list[int] = []
    state, budget = start_state, len(succ) + 16  # every hop moves back in time or to an earlier node
    while state >= 0 and budget > 0:
        budget -= 1
        seen.append(state)
        if exit_time[state] <= t_start:
            break
        state = int(succ[state])
    return np.asarray(seen, dtype=np.int64)


def cut(table: States, visited: np.ndarray, t_start: int, t_end: int) -> Walk:
    """The segments of the visited states, each up to the time the walk entered its state and from t_start, in time
    order; the time before the walk's last state left off, where it did not reach t_start, is `unrecorded`."""
    entry = np.minimum.accumulate(np.concatenate([[t_end], table.exit[visited[:-1]]])) if len(visited) else \
        np.zeros(0, dtype=np.int64)
    lo = np.maximum(table.lo[visited], t_start)
    hi = np.minimum(table.hi[visited], entry[:, None])
    keep = hi > lo
    rows = np.broadcast_to(visited[:, None], keep.shape)
    parts = [table.node[rows[keep]], lo[keep], hi[keep], table.cls[visited][keep], table.what[visited][keep],
             table.edge[visited][keep]]
    reached = min(int(entry[-1]), int(table.exit[visited[-1]])) if len(visited) else t_end
    if reached > t_start:  # the chain ended (a thread's first call, a cycle cut short) before the window's start
        parts = [np.append(column, value) for column, value in zip(parts, (-1, t_start, reached, HOST, UNRECORDED, NONE),
                                                                    strict=True)]
    return Walk(*[column[::-1] for column in parts])
