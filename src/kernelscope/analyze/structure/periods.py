"""Where a sequence of kernels repeats itself: the tandem repeats of an integer sequence (kernel names as codes).

A decoder runs the same kernels once per layer, so inside a forward pass its kernel sequence is a unit of p kernels
repeated N times (N layers). Such a repeat shows as a run of positions i where code[i] == code[i + p]: a run of r
matches holds r // p + 1 whole copies of the unit. Periods are tried only where some kernel name recurs at that
distance (the distances between consecutive occurrences of one name, most frequent first), so a sequence of n
kernels costs O(n · candidates), not O(n²). Pure numpy; no trace knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_PERIOD = 3  # a unit of fewer kernels is an inner loop (a copy, a pair of element-wise kernels), not a layer
MAX_CANDIDATES = 48


@dataclass(frozen=True)
class Repeat:
    """`copies` whole copies of the unit code[start : start + period], back to back."""

    start: int
    period: int
    copies: int
    slack: int = 0  # kernels after the last copy that still repeat the unit's first ones (a part of a copy)

    @property
    def end(self) -> int:
        return self.start + self.period * self.copies

    @property
    def covered(self) -> int:
        return self.period * self.copies


@dataclass(frozen=True)
class PeriodScore:
    """A period, the repeats it forms (at least `min_copies` copies each) and the kernels they cover."""

    period: int
    repeats: tuple[Repeat, ...]
    covered: int


def candidate_periods(codes: np.ndarray, min_period: int = MIN_PERIOD, max_period: int | None = None,
                      limit: int = MAX_CANDIDATES) -> list[int]:
    """Distances at which some code recurs next, most frequent first (at most `limit`), within the bounds."""
    n = len(codes)
    max_period = n // 2 if max_period is None else min(max_period, n // 2)
    if n < 2 * min_period or max_period < min_period:
        return []
    order = np.lexsort((np.arange(n), codes))  # by code, then position
    same = codes[order][1:] == codes[order][:-1]
    gaps = (order[1:] - order[:-1])[same]
    gaps = gaps[(gaps >= min_period) & (gaps <= max_period)]
    if gaps.size == 0:
        return []
    values, counts = np.unique(gaps, return_counts=True)
    top = np.lexsort((values, -counts))[:limit]
    return [int(v) for v in values[top]]


def repeats_at(codes: np.ndarray, period: int, min_copies: int = 2) -> list[Repeat]:
    """Maximal repeats of the given period with at least `min_copies` whole copies, in order."""
    if period <= 0 or len(codes) < period * min_copies:
        return []
    matches = codes[:-period] == codes[period:]
    edges = np.flatnonzero(np.diff(np.concatenate(([False], matches, [False])).astype(np.int8)))
    starts, ends = edges[0::2], edges[1::2]
    copies = (ends - starts) // period + 1
    slack = (ends - starts) % period
    keep = copies >= min_copies
    return [Repeat(int(s), period, int(c), int(k))
            for s, c, k in zip(starts[keep], copies[keep], slack[keep], strict=True)]


def scored_periods(codes: np.ndarray, min_period: int = MIN_PERIOD, min_copies: int = 2,
                   max_period: int | None = None) -> list[PeriodScore]:
    """Every candidate period with the kernels its repeats cover, best first (ties: the shorter period, so that a
    unit is never read as two copies of itself)."""
    scores = []
    for period in candidate_periods(codes, min_period, max_period):
        found = tuple(repeats_at(codes, period, min_copies))
        if found:
            scores.append(PeriodScore(period, found, sum(r.covered for r in found)))
    scores.sort(key=lambda s: (-s.covered, s.period))
    return scores


def is_compound(unit: np.ndarray, share: float = 0.5) -> bool:
    """Whether a unit is itself mostly a repeat of a shorter unit (a forward pass holding its layers, or two copies
    of one layer): its best inner repeat covers at least `share` of it."""
    inner = scored_periods(unit, max_period=len(unit) // 2)
    return bool(inner) and inner[0].covered >= share * len(unit)


def best_primitive(codes: np.ndarray, min_copies: int = 2) -> tuple[PeriodScore | None, list[PeriodScore]]:
    """The best-covering period whose unit is not made of a shorter repeat, and the other primitive periods (best
    first) for the caller to weigh against it."""
    primitive = []
    for score in scored_periods(codes, min_copies=min_copies):
        first = max(score.repeats, key=lambda r: r.covered)
        if not is_compound(codes[first.start:first.start + score.period]):
            primitive.append(score)
    return (primitive[0] if primitive else None), primitive[1:]


def overlap(a: Repeat, b: Repeat) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))
