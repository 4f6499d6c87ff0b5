"""Energy per token on a what-if target (docs/whatif.md, "Energy"): per step of prefill and decode,

    joules = static watts × time per step + Σ kernels (FLOPs × pJ/FLOP of their precision + bytes × pJ/byte) × 1e-12

with the kernels' analytic FLOPs and bytes (their cost columns) and the time per step the study projects (device
time per step plus the host time the run measured around it, where it did). The same formula on the measuring
device with its own terms, set against the joules per token `profile --energy` measured, is the calibration: its
ratio says whether the terms mean anything for this run. Everything here is estimated. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges

PHASES = (ranges.PREFILL, ranges.DECODE)
EVERY = "*"  # a pJ/FLOP for every precision not named


@dataclass(frozen=True)
class EnergyTerms:
    """A device's energy terms: picojoules per FLOP by precision (EVERY for the rest), per byte of DRAM traffic, and
    static watts; `source` says per term where it came from (hardware data, a spec file, the command line)."""

    pj_per_flop: dict[str, float] = field(default_factory=dict)
    pj_per_byte: float | None = None
    static_watts: float | None = None
    source: dict[str, str] = field(default_factory=dict)

    def missing(self) -> list[str]:
        return [name for name, value in (("pj_per_flop", self.pj_per_flop), ("pj_per_byte", self.pj_per_byte),
                                         ("static_watts", self.static_watts)) if value is None or value == {}]

    def per_flop(self, precision: str | None) -> float | None:
        if precision in self.pj_per_flop:
            return self.pj_per_flop[precision]
        if precision == "tf32" and "fp32" in self.pj_per_flop:  # TF32 runs on the FP32 inputs' path
            return self.pj_per_flop["fp32"]
        return self.pj_per_flop.get(EVERY)

    def overridden(self, other: EnergyTerms) -> EnergyTerms:
        """These terms with every term `other` gives in their place."""
        flops = {**self.pj_per_flop, **other.pj_per_flop} if other.pj_per_flop else self.pj_per_flop
        return EnergyTerms(
            pj_per_flop=flops, pj_per_byte=other.pj_per_byte if other.pj_per_byte is not None else self.pj_per_byte,
            static_watts=other.static_watts if other.static_watts is not None else self.static_watts,
            source={**self.source, **other.source})


@dataclass(frozen=True)
class PhaseWork:
    """A phase's work per step: analytic FLOPs by precision and bytes, and the tokens a step makes."""

    phase: str
    flops: dict[str, float]
    bytes: float
    tokens: int | None


@dataclass(frozen=True)
class EnergyEstimate:
    """One phase on one device: joules per step (static and dynamic), per token, and FLOPs no term priced."""

    time_ns: float
    static_joules: float
    dynamic_joules: float
    joules_per_token: float | None
    unpriced_flops: float = 0.0

    @property
    def joules(self) -> float:
        return self.static_joules + self.dynamic_joules


@dataclass(frozen=True)
class PhaseEnergy:
    phase: str
    tokens_per_step: int | None
    flops_per_step: float
    bytes_per_step: float
    host_ns: float | None  # measured host time per step, in both times below
    source: EnergyEstimate
    target: EnergyEstimate
    measured_joules_per_token: float | None = None
    calibration_ratio: float | None = None  # source estimate ÷ measured


@dataclass(frozen=True)
class EnergyProjection:
    phases: list[PhaseEnergy]
    source_terms: EnergyTerms
    target_terms: EnergyTerms
    source_terms_from_target: bool  # the measuring device has no terms of its own: the target's priced it


def phase_work(kernels: pl.DataFrame, steps: dict[str, int], tokens: dict[str, int | None]) -> list[PhaseWork]:
    """Per phase of PHASES the run has, its kernels' analytic FLOPs (by precision) and bytes per step."""
    out = []
    for phase in PHASES:
        rows = kernels.filter(pl.col("phase") == phase)
        if rows.is_empty() or phase not in steps:
            continue
        per_step = steps[phase]
        by_precision = (rows.filter(pl.col("flops").is_not_null() & (pl.col("flops") > 0))
                        .group_by("precision").agg(pl.col("flops").sum()))
        flops = {str(p): float(f) / per_step for p, f in by_precision.iter_rows()}
        moved = float(rows["bytes_moved"].fill_null(0.0).fill_nan(0.0).clip(lower_bound=0.0).sum()) / per_step
        out.append(PhaseWork(phase=phase, flops=flops, bytes=moved, tokens=tokens.get(phase)))
    return out


def estimate(work: PhaseWork, terms: EnergyTerms, time_ns: float) -> EnergyEstimate:
    """The formula on one device (terms complete: EnergyTerms.missing() empty)."""
    priced = 0.0
    unpriced = 0.0
    for precision, flops in work.flops.items():
        per = terms.per_flop(precision)
        if per is None:
            unpriced += flops
        else:
            priced += flops * per
    dynamic = (priced + work.bytes * (terms.pj_per_byte or 0.0)) * 1e-12
    static = (terms.static_watts or 0.0) * time_ns * 1e-9
    per_token = (static + dynamic) / work.tokens if work.tokens else None
    return EnergyEstimate(time_ns=time_ns, static_joules=static, dynamic_joules=dynamic, joules_per_token=per_token,
                          unpriced_flops=unpriced)


def project_energy(work: list[PhaseWork], times: dict[str, tuple[float, float]], host_ns: dict[str, float | None],
                   source_terms: EnergyTerms, target_terms: EnergyTerms, measured: dict[str, float | None],
                   source_terms_from_target: bool = False) -> EnergyProjection:
    """times: per phase (source, target) device time per step (ns); host_ns: measured host time per step, added to
    both; measured: joules per token from profile --energy."""
    rows = []
    for w in work:
        if w.phase not in times:
            continue
        host = host_ns.get(w.phase)
        source_ns, target_ns = (t + (host or 0.0) for t in times[w.phase])
        on_source = estimate(w, source_terms, source_ns)
        on_target = estimate(w, target_terms, target_ns)
        real = measured.get(w.phase)
        ratio = (on_source.joules_per_token / real if real and on_source.joules_per_token is not None
                 and math.isfinite(real) and real > 0 else None)
        rows.append(PhaseEnergy(phase=w.phase, tokens_per_step=w.tokens, flops_per_step=sum(w.flops.values()),
                                bytes_per_step=w.bytes, host_ns=host, source=on_source, target=on_target,
                                measured_joules_per_token=real, calibration_ratio=ratio))
    return EnergyProjection(phases=rows, source_terms=source_terms, target_terms=target_terms,
                            source_terms_from_target=source_terms_from_target)
