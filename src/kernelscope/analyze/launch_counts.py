"""How many launches a kernels row stands for.

A row of kernels.parquet is one launch on runs recorded with a timeline (Kineto, Nsight Compute), and a whole
kernel summary on runs imported from `nsys stats` (docs/nsys.md): then `instances` holds its launch count,
`dur_ns` the total time of those launches and `min_ns`, `max_ns`, `med_ns`, `stddev_ns` their statistics. A null
or missing `instances` means one launch. Counts of launches sum `instances`; never count rows."""

from __future__ import annotations

import polars as pl

from kernelscope.contracts.tables import INSTANCES


def launches() -> pl.Expr:
    """Per row: the launches it stands for."""
    return pl.col(INSTANCES).fill_null(1)


def launch_count() -> pl.Expr:
    """Number of launches of the rows in context (sum of `instances`, null counting 1)."""
    return launches().sum()


def has_timeline(kernels: pl.DataFrame) -> bool:
    """Whether any row has a start time: summaries of launches (nsys stats imports) have none."""
    return kernels.height > 0 and kernels["start_ns"].is_not_null().any()
