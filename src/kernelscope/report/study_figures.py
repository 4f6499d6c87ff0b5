"""The figures of a comparison (device time per step by kind of work, one bar per run) and of a what-if study
(projected time per step against one quantity)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from kernelscope.report.figure_base import (  # noqa: E402
    PALETTE,
    literal,
    save_figure,
)


def compare_bars(mix: pl.DataFrame, labels: list[str], column: str, title: str, directory: Path, stem: str,
                 top: int = 8) -> list[Path]:
    """One horizontal bar per run, its device time per step stacked by `column` (category or library): the
    `top` largest values over all runs, the rest as 'other'. Columns per run: per_step_ns[<label>]."""
    per_run = [f"per_step_ns[{label}]" for label in labels]
    if mix.height == 0 or not all(c in mix.columns for c in per_run):
        return []
    filled = mix.with_columns(pl.col(c).fill_null(0.0) for c in per_run)
    order = filled.with_columns(pl.max_horizontal(per_run).alias("_max")).sort(["_max", column],
                                                                             descending=[True, False])
    keep = order[column].head(top).to_list()
    rest = order.filter(~pl.col(column).is_in(keep))
    groups = keep + (["other (rest)"] if rest.height else [])
    values = {g: [float(filled.filter(pl.col(column) == g)[c].sum()) for c in per_run] for g in keep}
    if rest.height:
        values["other (rest)"] = [float(rest[c].sum()) for c in per_run]
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.55 * len(labels)))
    left = np.zeros(len(labels))
    scale, unit = time_unit(max((sum(v[i] for v in values.values()) for i in range(len(labels))), default=0.0))
    for i, group in enumerate(groups):
        widths = np.array(values[group]) / scale
        ax.barh(range(len(labels)), widths, left=left, color=PALETTE[i % len(PALETTE)], label=literal(group), height=0.6)
        left += widths
    for y, total in enumerate(left):
        ax.annotate(f"{total:,.1f} {unit}", (total, y), textcoords="offset points", xytext=(4, -3), fontsize=7.5)
    ax.set_yticks(range(len(labels)), [literal(label) for label in labels])
    ax.invert_yaxis()
    ax.set_xlabel(f"device time per step ({unit})")
    ax.set_xlim(0, max(left.max(), 1e-9) * 1.18)
    ax.set_title(literal(title))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 3 else -0.2), ncol=3, frameon=False)
    return save_figure(fig, directory, stem)


def time_unit(largest_ns: float) -> tuple[float, str]:
    """The unit an axis of times reads in: ms once its largest value passes 10 ms, else µs (divisor from ns)."""
    return (1e6, "ms") if largest_ns > 1e7 else (1e3, "µs")


SWEEP_AXES = {"bandwidth": ("DRAM bandwidth (TB/s)", 1e12), "sram_bytes": ("on-chip memory (MB)", 1e6),
              "l2_bytes": ("L2 (MB)", 1e6), "onchip_bandwidth": ("on-chip bandwidth (TB/s)", 1e12),
              "latency_scale": ("per-kernel latency scale", 1.0)}


def sweep_chart(points: pl.DataFrame, parameter: str, phase: str, title: str, directory: Path, stem: str,
                mark: float | None = None) -> list[Path]:
    """Projected time per step against one quantity, stacked by kind of work; `mark` draws the target's value."""
    rows = points.filter((pl.col("parameter") == parameter) & (pl.col("phase") == phase))
    if rows.height == 0:
        return []
    label, unit = SWEEP_AXES.get(parameter, (f"{parameter} peak (TFLOP/s)", 1e12))
    values = sorted(set(rows["value"].to_list()))
    groups = (rows.group_by("group").agg(pl.col("projected_per_step_ns").sum())
              .sort(["projected_per_step_ns", "group"], descending=[True, False])["group"].to_list())
    stack = []
    for group in groups:
        by_value = dict(rows.filter(pl.col("group") == group).select("value", "projected_per_step_ns").iter_rows())
        stack.append([by_value.get(v, 0.0) for v in values])
    time_scale, time_word = time_unit(float(np.sum(np.array(stack), axis=0).max()) if stack else 0.0)
    stack = [[value / time_scale for value in row] for row in stack]
    xs = [v / unit for v in values]
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    ax.stackplot(xs, stack, labels=[literal(g) for g in groups], colors=[PALETTE[i % len(PALETTE)] for i in range(len(groups))], alpha=0.85)
    totals = np.sum(np.array(stack), axis=0)
    ax.plot(xs, totals, color="0.15", lw=1.2, marker="o", ms=3)
    if mark is not None:
        ax.axvline(mark / unit, color="0.3", ls="--", lw=0.9)
        ax.annotate("target", (mark / unit, totals.max()), textcoords="offset points", xytext=(4, -10), fontsize=7.5)
    ax.set_xlabel(label)
    ax.set_ylabel(f"projected {phase} time per step ({time_word})")
    ax.set_title(literal(title))
    ax.set_ylim(0, totals.max() * 1.1 if totals.max() > 0 else 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)  # beside, over nothing
    fig.subplots_adjust(right=0.72)
    return save_figure(fig, directory, stem)
