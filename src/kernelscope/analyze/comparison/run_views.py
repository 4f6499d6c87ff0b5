"""One run prepared for comparison (`RunView`), the comparison's rules (data/compare.toml) and the names of its per-run columns (per_step_ns[h200], ratio[b/a], delta_ns[b-a])."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kernelscope.analyze.comparison.metrics import Estimate
from kernelscope.contracts.run import Run
from kernelscope.contracts.summary import Summary
from kernelscope.load import knowledge


def compare_rules() -> dict[str, Any]:
    return knowledge.compare_rules()


@dataclass
class RunView:
    """One run prepared for comparison: its kernels with catalog, layer and matching columns."""

    label: str
    run: Run
    summary: Summary
    kernels: pl.DataFrame
    phases: pl.DataFrame
    steps: dict[str, int]
    has_modules: bool
    timing_estimates: dict[str, Estimate] = field(default_factory=dict)  # analyze/comparison/metrics: the one definition
    step_estimates: dict[str, Estimate] = field(default_factory=dict)  # per phase: mean device time per step


def col(metric: str, label: str) -> str:
    """Name of a per-run column: per_step_ns[h200]."""
    return f"{metric}[{label}]"


def ratio_col(label: str, base: str) -> str:
    return f"ratio[{label}/{base}]"


def delta_col(label: str, base: str) -> str:
    return f"delta_ns[{label}-{base}]"
