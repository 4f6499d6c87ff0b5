"""Lanes for a trace viewer: Perfetto (and chrome://tracing) drop a complete slice (`ph: X`) that overlaps another on
its track without nesting in it. Kernels of one stream overlap under programmatic dependent launch (a kernel starts
before the previous one ends), and a foreign trace's ranges may cross its ops. Each such slice goes to an extra lane
of its track, so that on every lane the slices nest: a lane holds no two device events that overlap at all, and no
two CPU slices that overlap without one containing the other."""

from __future__ import annotations

import numpy as np

LANE_STRIDE = 1 << 40  # a lane's tid: the track's own tid + lane · LANE_STRIDE (tids stay below 2^53 in JSON)


def lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray, nested: bool) -> np.ndarray:
    """The lane (0: the track itself) of each slice, in the order given. `track`: an int64 code per slice (its
    (pid, tid) or (device, stream)); `start`, `end`: int64 ns. `nested`: slices on a lane may contain one another
    (CPU ops and calls); otherwise they may not overlap at all (device events)."""
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    order = np.lexsort((-end, start, track))
    t, s, e = track[order], start[order], end[order]
    first = np.r_[True, t[1:] != t[:-1]]
    # The furthest end of everything before on the same track: a slice that starts at or after it overlaps nothing.
    reach = _running_max_by_group(e, first)
    before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    before[first] = np.iinfo(np.int64).min
    clear = s >= before
    if clear.all():
        return out
    # Tracks with an overlap are laid out slice by slice; the others stay on their own lane.
    crowded = np.unique(t[~clear])
    rows = np.flatnonzero(np.isin(t, crowded))
    layout = _nested_lanes if nested else _separate_lanes
    out[order[rows]] = layout(t[rows].tolist(), s[rows].tolist(), e[rows].tolist())
    return out


def _running_max_by_group(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of `values`, restarting where `first` is true (a loop over tracks, not slices)."""
    out = np.empty_like(values)
    bounds = np.r_[np.flatnonzero(first), len(values)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _separate_lanes(track: list[int], start: list[int], end: list[int]) -> list[int]:
    """Device events, sorted by track and start: each to the first lane whose last event has ended."""
    out, ends, current = [], [], None
    for t, s, e in zip(track, start, end, strict=True):
        if t != current:
            current, ends = t, []
        for lane, last in enumerate(ends):
            if last <= s:
                ends[lane] = e
                out.append(lane)
                break
        else:
            ends.append(e)
            out.append(len(ends) - 1)
    return out


def _nested_lanes(track: list[int], start: list[int], end: list[int]) -> list[int]:
    """CPU slices, sorted by track, start and longest first: each to the first lane where it nests in the slice open
    there (or where nothing is open)."""
    out, stacks, current = [], [], None
    for t, s, e in zip(track, start, end, strict=True):
        if t != current:
            current, stacks = t, []
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                out.append(lane)
                break
        else:
            stacks.append([e])
            out.append(len(stacks) - 1)
    return out
