"""Key figures of a run (summary.json; keys documented in docs/run-format.md)."""

from __future__ import annotations

import msgspec
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.attribution.attribution import attribution_coverage
from kernelscope.analyze.comparison.metrics import noise_summary
from kernelscope.analyze.integrity import integrity_summary
from kernelscope.analyze.paths.critical_path import CriticalPath, phase_summary, several_ranks
from kernelscope.analyze.structure.phases import phase_table
from kernelscope.analyze.structure.structure_summary import structure_summary
from kernelscope.analyze.wide_tables import time_where
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import CriticalPathPhase, EnergySummary, KeyTimings, PhaseSummary, Summary
from kernelscope.contracts.tables import COST_SOURCES, CPU_OP
from kernelscope.contracts.trace_records import EnergyInfo


def _share(kernels: pl.DataFrame, condition: pl.Expr) -> float:
    total = kernels["dur_ns"].sum()
    return float(time_where(kernels, condition) / total) if total else 0.0


def _by_source(kernels: pl.DataFrame) -> dict[str, float] | None:
    """Share of device time costed from each source; None for runs costed before sources were recorded."""
    costed = pl.col("cost_model").is_not_null()
    if kernels.select((costed & pl.col("cost_source").is_null()).any()).item():
        return None
    return {source: _share(kernels, costed & (pl.col("cost_source") == source)) for source in COST_SOURCES}


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e3


def _phase(row: dict, cpu: bool) -> PhaseSummary:
    total, per_step = row["device_time_ns"] / 1e3, _us(row["device_time_per_step_ns"])
    if cpu:
        return PhaseSummary(kernel_count=row["kernel_count"], device_time_us=None, steps=row["steps"],
                            kernels_per_step=row["kernels_per_step"], cpu_time_us=total,
                            cpu_time_per_step_us=per_step)
    return PhaseSummary(kernel_count=row["kernel_count"], device_time_us=total, steps=row["steps"],
                        device_time_per_step_us=per_step, kernels_per_step=row["kernels_per_step"])


def summarize(run: Run, phases: pl.DataFrame | None = None, critical: CriticalPath | None = None) -> Summary:
    """kernel_count counts launches (a summary row stands for `instances` of them); kernel_rows, the rows of
    kernels.parquet, is added only where the two differ. Per-step figures are null where steps are unknown.
    The run's kernels carry their costs and catalog names (analyze.run_costs.with_costs). `phases`:
    phase_table(run.kernels), where the caller has it (the report's phase table is the same one). `critical`:
    the run's critical paths (analyze/paths/path_tables.run_critical_paths), the `critical_path` key."""
    kernels = run.kernels
    info = run.info
    plain = info.plain_timings
    cpu = bool(kernels.height) and bool((kernels["kind"] == CPU_OP).all())
    phases = phase_table(kernels) if phases is None else phases
    per_phase = {row["phase"]: _phase(row, cpu) for row in phases.iter_rows(named=True)}
    launches = int(kernels["instances"].sum())
    noise = noise_summary(info, kernels, {row["phase"]: row["device_time_per_step_ns"]
                                          for row in phases.iter_rows(named=True)})
    total_us = float(kernels["dur_ns"].sum()) / 1e3
    return Summary(
        source=info.source,
        model=info.workload.model if info.workload is not None else None,
        device=info.hardware.name,
        kind="cpu" if cpu else "gpu",
        kernel_count=launches,
        kernel_rows=kernels.height if launches != kernels.height else msgspec.UNSET,
        device_time_us=0.0 if cpu else total_us,
        cpu_time_us=total_us if cpu else None,
        attribution_coverage=attribution_coverage(kernels),
        phase_coverage=_share(kernels, pl.col("phase") != ranges.UNKNOWN),
        module_coverage=_share(kernels, pl.col("module").is_not_null()),
        op_coverage=_share(kernels, pl.col("op").is_not_null()),
        cost_coverage=_share(kernels, pl.col("cost_model").is_not_null()),
        cost_coverage_by_source=_by_source(kernels),
        catalog_coverage=_share(kernels, (pl.col("library") != "unknown") & (pl.col("category") != "other")),
        **_config_source(info),
        timings=KeyTimings(ttft_ms=plain.ttft_ms, tpot_ms=plain.tpot_ms, tokens_per_s=plain.tokens_per_s,
                           e2e_ms=plain.e2e_ms),
        phases=per_phase,
        # CUDA-graph replays: how many got module attribution from an eager step, and why the others did not.
        graph_replays=info.graph_replays if info.graph_replays is not None else msgspec.UNSET,
        structure=structure_summary(kernels, info.attribution) if kernels.height else msgspec.UNSET,
        critical_path=_critical_path(critical),
        # Whether the run's repeats vary too much for small changes to mean anything (docs/run-format.md).
        noise=noise if noise is not None else msgspec.UNSET,
        # What the files read were missing or held inconsistently, each counted (docs/run-format.md).
        integrity=integrity if (integrity := integrity_summary(info.trace.audits() if info.trace else [])) is not None
        else msgspec.UNSET,
        energy=_energy(info.energy),
    )


def _config_source(info: RunInfo) -> dict[str, str]:
    """summary.json's model_config_source and recognised_model, where an import was costed from a config."""
    source = info.model.config_source if info.model is not None and info.model.config else msgspec.UNSET
    if not isinstance(source, str):
        return {}
    recognised = info.model_recognition.entry if info.model_recognition is not None else None
    return {"model_config_source": source, **({"recognised_model": recognised} if recognised else {})}


def _energy(energy: EnergyInfo | None) -> EnergySummary | msgspec.UnsetType:
    if energy is None:
        return msgspec.UNSET
    return EnergySummary(prefill_joules_per_token=energy.prefill_joules_per_token,
                         decode_joules_per_token=energy.decode_joules_per_token,
                         counter_joules=energy.counter_joules, per_token_check=energy.per_token_check,
                         agreement=energy.agreement,
                         counter_update_ms=energy.counter_update_ms, split=energy.split)


def _critical_path(critical: CriticalPath | None) -> dict[str, CriticalPathPhase] | msgspec.UnsetType:
    if critical is None or critical.steps.height == 0:
        return msgspec.UNSET
    return {phase: CriticalPathPhase(**entry)
            for phase, entry in phase_summary(critical.steps, several_ranks(critical)).items()}
