"""The columns a comparison's tables carry per compared run to say what the one verdict rule (analyze/comparison/metrics.py)
made of its change against the baseline: significant, verdict (its words), threshold and whether the runs' noise
set it (docs/compare.md, "Noise")."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.metrics import Verdict


def significant_col(label: str, base: str) -> str:
    """Name of the column that says whether a run's change from the baseline exceeds its threshold (the verdict
    rule of analyze/comparison/metrics.py); null where it cannot be judged."""
    return f"significant[{label}/{base}]"


def verdict_col(label: str, base: str) -> str:
    """Name of the column with the verdict's words: slower, faster, higher, lower or within noise."""
    return f"verdict[{label}/{base}]"


def threshold_col(label: str, base: str) -> str:
    """Name of the column with the threshold the change was held to (%), and noise_known_col whether it came from
    the runs' noise (else the floor alone)."""
    return f"threshold_pct[{label}/{base}]"


def noise_known_col(label: str, base: str) -> str:
    return f"noise_known[{label}/{base}]"


def verdict_columns(table: pl.DataFrame, base: str, verdicts: dict[str, list[Verdict | None]]) -> pl.DataFrame:
    """The verdict columns of each compared run against the baseline `base` (`verdicts`: label → one verdict or
    None per row of `table`)."""
    columns = []
    for label, found in verdicts.items():
        columns += [
            pl.Series(significant_col(label, base), [None if v is None else v.status != metrics.SAME for v in found],
                      dtype=pl.Boolean),
            pl.Series(verdict_col(label, base), [None if v is None else v.direction for v in found], dtype=pl.String),
            pl.Series(threshold_col(label, base), [None if v is None else 100.0 * v.threshold for v in found],
                      dtype=pl.Float64),
            pl.Series(noise_known_col(label, base), [None if v is None else v.noise_known for v in found],
                      dtype=pl.Boolean),
        ]
    return table.with_columns(columns)
