"""How much a timing varies over its repeats (min, median, max, coefficient of variation), and whether a change
between two runs is larger than that variation. A change counts as significant only when it exceeds the spread
of both runs: their ranges [min, max] do not overlap. With fewer than two values on either side the spread is
unknown and so is the significance."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    n: int
    min: float
    median: float
    max: float
    cv: float | None  # sample standard deviation over the mean (None with one value or a zero mean)

    @property
    def known(self) -> bool:
        return self.n >= 2


def spread(values: Iterable[float | None]) -> Spread | None:
    """The spread of the values given (missing ones left out); None when there is none."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    mean = statistics.fmean(xs)
    cv = statistics.stdev(xs) / mean if len(xs) >= 2 and mean else None
    return Spread(len(xs), min(xs), statistics.median(xs), max(xs), cv)


def significant(a: Spread | None, b: Spread | None) -> bool | None:
    """True when the two ranges do not overlap (the change exceeds the spread of both), False when they do
    (within noise), None when either side has fewer than two values."""
    if a is None or b is None or not a.known or not b.known:
        return None
    return a.max < b.min or b.max < a.min
