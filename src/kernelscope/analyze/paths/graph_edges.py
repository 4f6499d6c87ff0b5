"""Vectorised searches the dependency graph is built with: predecessors within sorted groups, the latest work to
end before a time (in the same group, or on another lane of it), and time covered by merged intervals. Keys put
groups into disjoint bands of one int64 space (group code · band + time), as analyze/intervals does."""

from __future__ import annotations

import numpy as np


def previous_in_group(codes: np.ndarray) -> np.ndarray:
    """For rows sorted so that each group's rows are contiguous: the index of the previous row of the same group,
    -1 for a group's first row."""
    n = len(codes)
    prev = np.arange(-1, n - 1, dtype=np.int64)
    if n:
        first = np.ones(n, dtype=bool)
        first[1:] = codes[1:] != codes[:-1]
        prev[first] = -1
    return prev


def dense_codes(*columns: np.ndarray) -> np.ndarray:
    """One small non-negative code per distinct combination of the columns' values."""
    if not columns or len(columns[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    # Column by column, each folded into the codes so far (in the columns' lexicographic order, as a row-wise
    # unique would number them): sorting plain integers, not rows (a row-wise unique took 0.2 s per million rows).
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        own = np.unique(np.asarray(column, dtype=np.int64), return_inverse=True)[1].reshape(-1)
        codes = np.unique(codes * (int(own.max()) + 1) + own, return_inverse=True)[1].reshape(-1)
    return codes.astype(np.int64)


def latest_before(group: np.ndarray, end: np.ndarray, query_group: np.ndarray, query_time: np.ndarray,
                  band: int, lane: np.ndarray | None = None, query_lane: np.ndarray | None = None) -> np.ndarray:
    """For each query, the row with the latest end at or before its time in its group (-1: none); with lanes,
    the latest such row on a lane other than the query's own."""
    if len(end) == 0:
        return np.full(len(query_time), -1, dtype=np.int64)
    keys = group.astype(np.int64) * band + end
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, query_group.astype(np.int64) * band + query_time, side="right") - 1
    found = (pos >= 0)
    found[found] = group[order[pos[found]]] == query_group[found]
    if lane is not None and query_lane is not None:
        # Rows of the same lane next to each other in end order form runs; the row before a run is on another lane.
        sorted_lane, sorted_group = lane[order], group[order]
        change = np.ones(len(order), dtype=bool)
        change[1:] = (sorted_lane[1:] != sorted_lane[:-1]) | (sorted_group[1:] != sorted_group[:-1])
        run_start = np.maximum.accumulate(np.where(change, np.arange(len(order)), 0))
        same = found.copy()
        same[found] = sorted_lane[pos[found]] == query_lane[found]
        pos = np.where(same, run_start[np.maximum(pos, 0)] - 1, pos)
        found = pos >= 0
        found[found] = sorted_group[pos[found]] == query_group[found]
    return np.where(found, order[np.maximum(pos, 0)], -1)


def merged_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals merged into disjoint ones (starts, ends, sorted) and the length covered before each."""
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(1, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > running[:-1]
    group = np.cumsum(new) - 1
    merged_start = starts[new]
    merged_end = np.zeros(len(merged_start), dtype=np.int64)
    np.maximum.at(merged_end, group, ends)
    return merged_start, merged_end, np.concatenate([[0], np.cumsum(merged_end - merged_start)])


def covered_before(merged: tuple[np.ndarray, np.ndarray, np.ndarray], times: np.ndarray) -> np.ndarray:
    """The length of the merged intervals' union before each time."""
    starts, ends, covered = merged
    times = np.asarray(times, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(len(times), dtype=np.int64)
    i = np.searchsorted(starts, times, side="right")
    last = np.maximum(i - 1, 0)
    inside = np.minimum(times, ends[last]) - starts[last]
    return np.where(i == 0, 0, covered[last] + inside)


def covered_between(merged: tuple[np.ndarray, np.ndarray, np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The length of the union inside each [a, b] (0 where b ≤ a)."""
    return np.maximum(covered_before(merged, b) - covered_before(merged, a), 0)
