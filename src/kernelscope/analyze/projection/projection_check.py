"""Check the projection model against a measurement it did not see: a run of one workload measured on device A,
projected onto device B, compared with the same workload measured on B (docs/whatif.md, "Held-out accuracy").

The estimate is the one the study gives: each kernel's time measured on A × model(B) ÷ model(A) for that kernel,
summed per phase and per kind of work, so that the model's error on A itself cancels kernel by kernel. The comparison is per step (device time of one decode step, of the
prefill, of a forward pass).
"""

from __future__ import annotations

import math

import polars as pl

from kernelscope.analyze.projection.projection import Options, ProjectionModel, Target, project
from kernelscope.analyze.projection.projection_estimate import with_estimate, with_rows
from kernelscope.analyze.structure.phases import step_counts

ALL = "*"  # the group of a phase's total


def _per_step(projected: pl.DataFrame, steps: dict[str, int], value: str, name: str) -> pl.DataFrame:
    """Per phase and kind of work (and the phase's total as group `*`): `value` summed per step."""
    by_group = projected.group_by("phase", "group").agg(pl.col(value).sum().cast(pl.Float64).alias(name))
    total = by_group.group_by("phase").agg(pl.col(name).sum()).with_columns(pl.lit(ALL).alias("group"))
    table = pl.concat([by_group, total.select(by_group.columns)])
    count = pl.col("phase").replace_strict(steps, default=1, return_dtype=pl.Float64)
    return table.with_columns(pl.col(name) / count)


def cross_estimate(source: pl.DataFrame, source_target: Target, other_target: Target, model: ProjectionModel,
                   source_l2_bytes: float | None, per_kernel: bool = True) -> pl.DataFrame:
    """A run's projection onto another device, per phase and kind of work (group `*`: the phase): `measured_ns`,
    `source_model_ns`, `target_model_ns` and `estimate_ns`, per step. The estimate is the study's: each kernel's
    measured time × model(target) ÷ model(source) for that kernel, summed (projection_estimate); with
    `per_kernel=False`, the sums' ratio (measured × target ÷ source model per phase and kind of work). `source`
    comes from projection_inputs; each device projects with the factors of its family."""
    steps = step_counts(source)
    rows = with_rows(source)
    on_source = project(rows, source_target, model, Options(), source_l2_bytes)
    on_target = project(rows, other_target, model, Options(), source_l2_bytes)
    table = (_per_step(on_source, steps, "dur_ns", "measured_ns")
             .join(_per_step(on_source, steps, "projected_ns", "source_model_ns"), on=["phase", "group"])
             .join(_per_step(on_target, steps, "projected_ns", "target_model_ns"), on=["phase", "group"]))
    if per_kernel:
        estimate = _per_step(with_estimate(on_source, on_target), steps, "estimate_ns", "estimate_ns")
        return table.join(estimate, on=["phase", "group"])
    ratio = pl.col("target_model_ns") / pl.col("source_model_ns")
    return table.with_columns(
        pl.when(pl.col("source_model_ns") > 0).then(pl.col("measured_ns") * ratio).otherwise(pl.col("measured_ns"))
        .alias("estimate_ns"))


def measured_per_step(inputs: pl.DataFrame) -> pl.DataFrame:
    """A run's measured device time per step, per phase and kind of work (group `*`: the phase): `other_ns`.
    `inputs` comes from projection_inputs (its kernels carry `group`)."""
    return _per_step(inputs, step_counts(inputs), "dur_ns", "other_ns")


def compare(estimate: pl.DataFrame, other: pl.DataFrame, min_share: float = 0.0) -> pl.DataFrame:
    """The estimate against the other device's measurement, on the phases and kinds of work both have: `error`
    (estimate ÷ measured − 1) and `log_ratio` (ln of that ratio). A kind of work below `min_share` of its phase's
    measured time on the other device is left out (a few microseconds of it say little about the model)."""
    joined = estimate.join(other, on=["phase", "group"], how="inner")
    share = pl.col("other_ns") / pl.col("other_ns").filter(pl.col("group") == ALL).first().over("phase")
    joined = joined.filter((pl.col("group") == ALL) | (share >= min_share)).filter(pl.col("other_ns") > 0)
    return joined.with_columns((pl.col("estimate_ns") / pl.col("other_ns") - 1).alias("error"),
                               (pl.col("estimate_ns") / pl.col("other_ns")).log().alias("log_ratio"))


def mean_absolute(errors: list[float]) -> float | None:
    """Mean of |error| (None for no errors)."""
    return sum(abs(e) for e in errors) / len(errors) if errors else None


def spread(log_ratios: list[float]) -> float | None:
    """Root mean square of log ratios: the relative width of a range (estimate × e^±spread) that held-out
    projections fell within about two times in three."""
    return math.sqrt(sum(v * v for v in log_ratios) / len(log_ratios)) if log_ratios else None
