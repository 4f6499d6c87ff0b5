"""The energy split of `profile --energy` (run.json and summary.json `energy.split`, docs/energy.md): board energy
fitted across the energy counter's update intervals as idle power × time plus, per class of kernels, extra power ×
the class's device time; reported only where the fit is determined."""

from __future__ import annotations

import msgspec

from kernelscope.contracts.record import Record

DETERMINED, NOT_DETERMINED = "determined", "not determined"
IDLE = "idle"  # the term of time itself: the board's power with no kernel of the classes running


class EnergySplitTerm(Record, kw_only=True):
    """One term of the fit: `idle` (watts over every second) or a class of kernels (extra watts over the seconds
    the class's kernels run). watts_error: the fit's standard error of `watts`. seconds: the term's time over the
    fitted intervals."""

    term: str
    watts: float
    watts_error: float
    seconds: float


class EnergySplitModel(Record, kw_only=True):
    """A set of classes the split tried, finest first, and how its fit came out: the columns' condition number
    (each scaled to unit length), the residual (root mean square over the mean interval energy), the largest
    standard error of a term over its watts, and why it is not determined (English; null where it is)."""

    model: str
    classes: list[str]
    condition: float | None = None
    residual: float | None = None
    term_error: float | None = None
    reason: str | None = None


class EnergySplitToken(Record, kw_only=True):
    """Per phase of the full generations (prefill: per prompt token, decode: per new token), each term's joules per
    token: its watts × its seconds inside that phase's windows ÷ their tokens, and their sum."""

    phase: str
    tokens: int
    joules_per_token: dict[str, float] = msgspec.field(default_factory=dict)
    total_joules_per_token: float


class EnergySplit(Record, kw_only=True):
    """status: `determined` (terms and per_token filled, the first model of `tried` that passed its checks) or
    `not determined` (reason says why, in English). intervals: the counter's update intervals fitted. limits: the
    checks' bounds (data/energy.toml). kernels_from: how the kernels' device time reaches the windows."""

    status: str
    method: str
    model: str | None = None
    intervals: int = 0
    dropped_intervals: int = 0  # intervals overlapping a window whose kernels the run does not have
    # The least and the largest share of an interval's time its kernels ran (device time, all classes): the idle
    # term is extrapolated from there to no kernels at all.
    busy_share: tuple[float, float] | None = None
    terms: list[EnergySplitTerm] = msgspec.field(default_factory=list)
    per_token: list[EnergySplitToken] = msgspec.field(default_factory=list)
    condition: float | None = None
    residual: float | None = None
    reason: str | None = None
    tried: list[EnergySplitModel] = msgspec.field(default_factory=list)
    limits: dict[str, float] = msgspec.field(default_factory=dict)
