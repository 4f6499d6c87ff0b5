"""Energy by class of kernels, where the data determines it (docs/energy.md, "Energy by kernel class").

The energy pass runs without the profiler, so its kernels are not recorded; the profiled generation ran the same
prompts, so each window of the pass (a prefill, a decode step) is given the device time of the profiled kernels of
the same phase and step (and generation), by class, spread evenly over the window. The observations are the
counter's update intervals inside the pass (the windows' own joules are the counter interpolated, not measured):

    ΔE(interval) = idle W × Δt + Σ_class extra W(class) × device time of the class in the interval

fitted by least squares for each model of data/energy.toml in turn, finest first; the first whose fit passes every
check (intervals, rank, condition number, residual, each term's standard error, no negative power) is reported,
labelled estimated. Pure: tables in, a record out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from kernelscope.analyze.energy import counter_updates
from kernelscope.analyze.hardware import Ceilings
from kernelscope.contracts.energy_split import (
    DETERMINED,
    IDLE,
    NOT_DETERMINED,
    EnergySplit,
    EnergySplitModel,
    EnergySplitTerm,
    EnergySplitToken,
)
from kernelscope.contracts.energy_tables import DECODE, DECODE_STEP_OFFSET, GENERATION, PREFILL
from kernelscope.load import knowledge

METHOD = ("least squares across the energy counter's update intervals: idle watts × time + per class of kernels "
          "extra watts × its device time; each window of the energy pass carries the profiled kernels of its "
          "phase and step")
COMPUTE_BOUND, MEMORY_BOUND, KERNELS = "compute_bound", "memory_bound", "kernels"


@dataclass(frozen=True)
class Design:
    """The fit's inputs: per interval its seconds, each class's device seconds and the counter's joules."""

    seconds: np.ndarray
    class_seconds: np.ndarray  # intervals × classes
    joules: np.ndarray
    classes: list[str]
    dropped: int


def energy_split(samples: pl.DataFrame, windows: pl.DataFrame, kernels: pl.DataFrame,
                 ceilings: Ceilings | None, rules: dict[str, Any] | None = None) -> EnergySplit:
    """The split, or why there is none (never an exception for tables that hold too little)."""
    rules = rules or knowledge.energy_rules()["split"]
    limits = {k: float(rules[k]) for k in ("max_condition", "max_residual", "max_term_error",
                                            "min_intervals_per_term")}

    def none(reason: str, tried: list[EnergySplitModel] | None = None, intervals: int = 0,
             dropped: int = 0) -> EnergySplit:
        return EnergySplit(status=NOT_DETERMINED, method=METHOD, reason=reason, tried=tried or [], limits=limits,
                           intervals=intervals, dropped_intervals=dropped)

    needed = {"phase", "step", "dur_ns"}
    if windows.is_empty() or samples.is_empty() or not needed <= set(kernels.columns):
        return none("the run has no energy windows, no samples or no kernel table")
    tried: list[EnergySplitModel] = []
    design = None
    for model in rules["models"]:
        classes = kernel_classes(kernels, model["classes"], ceilings)
        if classes is None:
            tried.append(EnergySplitModel(model=model["name"], classes=[],
                                          reason="the device's ceilings are unknown: no ridge point"))
            continue
        design = interval_design(samples, windows, kernels.with_columns(classes.alias("_class")))
        if design is None:
            return none("no window of the energy pass matches a phase and step of the run's kernels", tried)
        fit = _fit(design, limits)
        tried.append(EnergySplitModel(model=model["name"], classes=design.classes, condition=fit.condition,
                                      residual=fit.residual, term_error=fit.term_error, reason=fit.reason))
        if fit.reason is None:
            busy = design.class_seconds.sum(axis=1) / design.seconds
            return EnergySplit(status=DETERMINED, method=METHOD, model=model["name"], intervals=len(design.joules),
                               busy_share=(float(busy.min()), float(busy.max())),
                               dropped_intervals=design.dropped, terms=fit.terms, condition=fit.condition,
                               residual=fit.residual, tried=tried, limits=limits,
                               per_token=_per_token(windows, kernels.with_columns(classes.alias("_class")),
                                                    fit.terms))
    last = tried[-1].reason if tried else "no model to try"
    return none(f"no model's fit is determined (the last: {last})", tried,
                len(design.joules) if design is not None else 0, design.dropped if design is not None else 0)


def kernel_classes(kernels: pl.DataFrame, how: str, ceilings: Ceilings | None) -> pl.Series | None:
    """Each kernel's class: `all` one class; `roofline` compute-bound at or above the ridge of its precision
    (analytic FLOPs ÷ bytes), memory-bound below it or without costs. None: `roofline` without ceilings."""
    if how == "all":
        return pl.Series([KERNELS] * kernels.height, dtype=pl.String)
    if ceilings is None or not {"flops", "bytes_moved", "precision"} <= set(kernels.columns):
        return None
    ridges = {p: ceilings.ridge(p) for p in kernels["precision"].drop_nulls().unique().to_list()}
    ridge = pl.col("precision").replace_strict(ridges, default=None, return_dtype=pl.Float64)
    intensity = pl.col("flops") / pl.col("bytes_moved")
    above = (pl.col("flops") > 0) & (pl.col("bytes_moved") > 0) & ridge.is_not_null() & (intensity >= ridge)
    return kernels.select(pl.when(above.fill_null(False)).then(pl.lit(COMPUTE_BOUND))
                          .otherwise(pl.lit(MEMORY_BOUND)).alias("_class"))["_class"]


def window_kernel_time(windows: pl.DataFrame, kernels: pl.DataFrame) -> tuple[pl.DataFrame, list[str]] | None:
    """The windows with one column of device ns per class (kernels' `_class`) from the profiled kernels of the same
    phase, step and generation (where the kernels number generations) and `matched` (false: a prefill or decode
    window whose kernels the run lacks). Setup windows hold no kernels: the profiled prefill range starts at
    generate() and holds them. None where no window matches."""
    classes = sorted(kernels["_class"].unique().to_list())
    by_generation = "generation" in kernels.columns and kernels["generation"].null_count() < kernels.height
    keys = ["phase", "_step", *(["generation"] if by_generation else [])]
    per_class = (kernels.filter(pl.col("phase").is_in([PREFILL, DECODE]))
                 .with_columns(pl.when(pl.col("phase") == DECODE).then(pl.col("step")).alias("_step"))
                 .group_by(*keys, "_class").agg(pl.col("dur_ns").cast(pl.Float64).sum())
                 .pivot(on="_class", index=keys, values="dur_ns"))
    for name in classes:
        if name not in per_class.columns:
            per_class = per_class.with_columns(pl.lit(0.0).alias(name))
    step = pl.when(pl.col("phase") == DECODE).then(pl.col("step") - DECODE_STEP_OFFSET)
    framed = (windows.with_columns(step.cast(pl.Int64).alias("_step"))
              .join(per_class.with_columns(pl.lit(True).alias("matched")), on=keys, how="left", nulls_equal=True)
              .with_columns(pl.col("matched").fill_null(~pl.col("phase").is_in([PREFILL, DECODE])),
                            *(pl.col(c).fill_null(0.0) for c in classes)))
    if not framed.filter(pl.col("phase").is_in([PREFILL, DECODE]))["matched"].any():
        return None
    return framed, classes


def interval_design(samples: pl.DataFrame, windows: pl.DataFrame, kernels: pl.DataFrame) -> Design | None:
    """The counter's update intervals wholly inside the pass (first window's start to last window's end), each with
    its seconds, joules and the classes' device seconds (a window's time spread evenly over it); an interval that
    overlaps an unmatched window is dropped."""
    framed = window_kernel_time(windows, kernels)
    if framed is None:
        return None
    table, classes = framed
    t, e_mj = counter_updates(samples)
    lo, hi = float(table["start_ns"].min()), float(table["end_ns"].max())
    keep = (t[:-1] >= lo) & (t[1:] <= hi)
    a, b, joules = t[:-1][keep], t[1:][keep], np.diff(e_mj)[keep] * 1e-3
    start = table["start_ns"].to_numpy().astype(np.float64)
    end = table["end_ns"].to_numpy().astype(np.float64)
    device = table.select(classes).to_numpy().astype(np.float64) * 1e-9
    unmatched = ~table["matched"].to_numpy()
    order = np.argsort(start)
    start, end, device, unmatched = start[order], end[order], device[order], unmatched[order]
    class_seconds = np.zeros((len(a), len(classes)))
    bad = np.zeros(len(a), dtype=bool)
    # Each window overlaps few intervals: walk the windows that can reach each interval.
    first = np.searchsorted(np.maximum.accumulate(end), a, side="right")
    for i in range(len(a)):
        j = first[i]
        while j < len(start) and start[j] < b[i]:
            share = (min(end[j], b[i]) - max(start[j], a[i])) / (end[j] - start[j])
            if share > 0:
                class_seconds[i] += share * device[j]
                bad[i] |= unmatched[j]
            j += 1
    good = ~bad & (joules >= 0)
    return Design(seconds=(b - a)[good] * 1e-9, class_seconds=class_seconds[good], joules=joules[good],
                  classes=classes, dropped=int((~good).sum()))


@dataclass(frozen=True)
class _Fit:
    terms: list[EnergySplitTerm]
    condition: float | None
    residual: float | None
    term_error: float | None
    reason: str | None


def _fit(design: Design, limits: dict[str, float]) -> _Fit:
    x = np.column_stack([design.seconds, design.class_seconds])
    y = design.joules
    names = [IDLE, *design.classes]
    n, p = x.shape
    if n < limits["min_intervals_per_term"] * p or n <= p:
        return _Fit([], None, None, None, f"{n} intervals for {p} terms")
    norms = np.linalg.norm(x, axis=0)
    if (norms == 0).any():
        return _Fit([], None, None, None, f"no device time of {names[int(np.argmin(norms))]} in any interval")
    scaled = x / norms
    rank = int(np.linalg.matrix_rank(scaled))
    condition = float(np.linalg.cond(scaled))
    if rank < p:
        return _Fit([], condition, None, None, f"rank {rank} for {p} terms: the windows' mixes do not tell them apart")
    watts, *_ = np.linalg.lstsq(x, y, rcond=None)
    residuals = y - x @ watts
    residual = float(np.sqrt(np.mean(residuals ** 2)) / np.mean(y)) if np.mean(y) > 0 else float("inf")
    covariance = residuals @ residuals / (n - p) * np.linalg.inv(x.T @ x)
    errors = np.sqrt(np.clip(np.diag(covariance), 0, None))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(watts > 0, errors / watts, np.inf)
    worst = int(np.argmax(relative))
    terms = [EnergySplitTerm(term=name, watts=float(w), watts_error=float(s), seconds=float(x[:, k].sum()))
             for k, (name, w, s) in enumerate(zip(names, watts, errors, strict=True))]
    term_error = float(relative[worst])
    failed = []
    if residual > limits["max_residual"]:
        failed.append(f"residual {residual:.1%} above {limits['max_residual']:.0%}")
    if (watts < 0).any():
        failed.append(f"{names[int(np.argmin(watts))]} fitted at {float(watts.min()):.0f} W (negative)")
    if term_error > limits["max_term_error"]:
        failed.append(f"{names[worst]} {watts[worst]:.0f} ± {errors[worst]:.0f} W (standard error above "
                      f"{limits['max_term_error']:.0%} of its value)")
    if condition > limits["max_condition"]:
        failed.append(f"condition number {condition:.0f} above {limits['max_condition']:.0f}")
    reason = "; ".join(failed) or None
    return _Fit(terms, condition, residual, term_error if np.isfinite(term_error) else None, reason)


def _per_token(windows: pl.DataFrame, kernels: pl.DataFrame, terms: list[EnergySplitTerm]) -> list[EnergySplitToken]:
    """Per phase of the full generations: each term's watts × its seconds in the phase's windows ÷ their tokens."""
    framed = window_kernel_time(windows, kernels)
    if framed is None:
        return []
    table, classes = framed
    watts = {t.term: t.watts for t in terms}
    out = []
    for phase in (PREFILL, DECODE):
        rows = table.filter((pl.col("stage") == GENERATION) & (pl.col("phase") == phase) & pl.col("matched"))
        tokens = int(rows["tokens"].sum()) if rows.height else 0
        if not tokens:
            continue
        seconds = {IDLE: float((rows["end_ns"] - rows["start_ns"]).sum()) * 1e-9,
                   **{c: float(rows[c].sum()) * 1e-9 for c in classes}}
        per = {term: watts[term] * seconds[term] / tokens for term in watts if term in seconds}
        out.append(EnergySplitToken(phase=phase, tokens=tokens, joules_per_token=per,
                                    total_joules_per_token=sum(per.values())))
    return out
