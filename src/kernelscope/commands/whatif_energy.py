"""`whatif`'s energy per token (docs/whatif.md, "Energy"): the energy terms of the measuring device and of the
target from the hardware data, a SPEC.toml and the command line, and the projection made from the study."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.hardware import HardwareSpec
from kernelscope.analyze.projection.energy_projection import (
    EnergyProjection,
    EnergyTerms,
    phase_work,
    project_energy,
)
from kernelscope.analyze.projection.whatif import WhatIf
from kernelscope.analyze.structure.phases import step_counts
from kernelscope.commands.whatif_terms import terms_from_table
from kernelscope.contracts.run import Run


@dataclass(frozen=True)
class EnergyRequest:
    """What gives the target's terms: its spec's `energy` table (hardware data or SPEC.toml) and the command line."""

    target_spec: Any = None  # the target's `energy` table as written, or None
    target_where: str = ""
    arguments: EnergyTerms = field(default_factory=EnergyTerms)


@dataclass(frozen=True)
class StudyEnergy:
    projection: EnergyProjection | None
    missing: list[str]  # the target's terms nobody gave (no projection then)
    measured: bool  # the run measured joules per token (profile --energy)


def device_terms(spec: HardwareSpec | None) -> EnergyTerms:
    if spec is None or spec.energy is None:
        return EnergyTerms()
    return terms_from_table(spec.energy, f"hardware data ({spec.key})")


def study_energy(run: Run, study: WhatIf, source_spec: HardwareSpec | None, request: EnergyRequest
                 ) -> StudyEnergy | None:
    """None where nothing asks for energy: no terms anywhere and no measured energy in the run."""
    energy = run.info.energy
    measured = {ranges.PREFILL: energy.prefill_joules_per_token if energy else None,
                ranges.DECODE: energy.decode_joules_per_token if energy else None}
    own = device_terms(source_spec)
    base = (terms_from_table(request.target_spec, request.target_where) if request.target_spec is not None
            else own if study.target.name == study.source.name else EnergyTerms())
    target = base.overridden(request.arguments)
    has_measured = any(v is not None for v in measured.values())
    if target.missing() and not has_measured and not request.arguments.source:
        return None
    if target.missing():
        return StudyEnergy(projection=None, missing=target.missing(), measured=has_measured)
    from_target = bool(own.missing())
    source = target if from_target else own
    if study.target.name == study.source.name and request.arguments.source:
        source = own.overridden(request.arguments)  # the run's own device: the command line prices both
        from_target = False
    steps = step_counts(run.kernels)
    workload = run.info.workload
    batch = workload.batch_size if workload is not None else None
    prompt = workload.prompt_len if workload is not None else None
    tokens = {ranges.PREFILL: batch * prompt if batch and prompt else None, ranges.DECODE: batch or None}
    phases = study.phases.filter(pl.col("phase").is_in([ranges.PREFILL, ranges.DECODE]))
    times = {r["phase"]: (r["measured_per_step_ns"], r["estimate_ns"]) for r in phases.iter_rows(named=True)
             if r["measured_per_step_ns"] is not None and r["estimate_ns"] is not None}
    projection = project_energy(phase_work(run.kernels, steps, tokens), times, _host_ns(study), source, target,
                                measured, source_terms_from_target=from_target)
    return StudyEnergy(projection=projection, missing=[], measured=has_measured)


def _host_ns(study: WhatIf) -> dict[str, float | None]:
    """The host time per step the run measured around its kernels: decode TPOT less the decode device time per
    step (the study's), prefill TTFT less the prefill device time; none where the run has no timings."""
    out: dict[str, float | None] = {ranges.DECODE: study.timings.host_ms * 1e6 if study.timings.host_ms is not None
                                    else None}
    prefill = study.calibration.filter(pl.col("phase") == ranges.PREFILL)
    ttft = study.timings.ttft_ms
    out[ranges.PREFILL] = (max(ttft * 1e6 - prefill["measured_per_step_ns"][0], 0.0)
                           if ttft is not None and prefill.height else None)
    return out
