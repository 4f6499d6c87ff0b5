"""Key figures of a run (summary.json; keys documented in docs/run-format.md)."""

from __future__ import annotations

import msgspec
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.attribution import attribution_coverage
from kernelscope.analyze.phases import phase_table
from kernelscope.contracts.run import Run
from kernelscope.contracts.summary import KeyTimings, PhaseSummary, Summary


def _share(kernels: pl.DataFrame, condition: pl.Expr) -> float:
    total = kernels["dur_ns"].sum()
    return float(kernels.filter(condition)["dur_ns"].sum() / total) if total else 0.0


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e3


def summarize(run: Run) -> Summary:
    """kernel_count counts launches (a summary row stands for `instances` of them); kernel_rows, the rows of
    kernels.parquet, is added only where the two differ. Per-step figures are null where steps are unknown.
    The run's kernels carry their costs and catalog names (analyze.run_costs.with_costs)."""
    kernels = run.kernels
    info = run.info
    plain = info.plain_timings
    phases = {
        row["phase"]: PhaseSummary(
            kernel_count=row["kernel_count"],
            device_time_us=row["device_time_ns"] / 1e3,
            steps=row["steps"],
            device_time_per_step_us=_us(row["device_time_per_step_ns"]),
            kernels_per_step=row["kernels_per_step"],
        )
        for row in phase_table(kernels).iter_rows(named=True)
    }
    launches = int(kernels["instances"].sum())
    return Summary(
        source=info.source,
        model=info.workload.model if info.workload is not None else None,
        device=info.hardware.name,
        kernel_count=launches,
        kernel_rows=kernels.height if launches != kernels.height else msgspec.UNSET,
        device_time_us=float(kernels["dur_ns"].sum()) / 1e3,
        attribution_coverage=attribution_coverage(kernels),
        phase_coverage=_share(kernels, pl.col("phase") != ranges.UNKNOWN),
        module_coverage=_share(kernels, pl.col("module").is_not_null()),
        op_coverage=_share(kernels, pl.col("op").is_not_null()),
        cost_coverage=_share(kernels, pl.col("cost_model").is_not_null()),
        catalog_coverage=_share(kernels, (pl.col("library") != "unknown") & (pl.col("category") != "other")),
        timings=KeyTimings(ttft_ms=plain.ttft_ms, tpot_ms=plain.tpot_ms, tokens_per_s=plain.tokens_per_s,
                           e2e_ms=plain.e2e_ms),
        phases=phases,
        # CUDA-graph replays: how many got module attribution from an eager step, and why the others did not.
        graph_replays=info.graph_replays if info.graph_replays is not None else msgspec.UNSET,
    )
