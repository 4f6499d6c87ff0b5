"""A regression gate: does a run's device time per step, TPOT or TTFT, or the time of its top kernels, exceed a
baseline's by more than the runs' noise? (docs/dataset.md, "kernelscope check", states the rule.)

Each run's noise is an allowance: the relative change its own variation can explain. Per step: NOISE_SIGMAS times
the spread of a phase's (or a kernel's) device time from one step to the next, as a robust standard deviation of
successive differences (1.4826 · median |Δ| / √2; differences ignore the slow growth of decode time with the
context), relative to the median step. Phases with fewer than MIN_STEPS steps (prefill of one generation) and
TPOT/TTFT: the spread of the unprofiled repeats in run.json (half the range of `e2e_ms_all`, relative to its
median). A baseline of several runs also allows their own spread around the median. A change is a regression when
it exceeds max(FLOOR, allowance of the baseline, allowance of the candidate), or --max-slowdown where given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from kernelscope.contracts.run import Run

FLOOR = 0.03  # smallest change that counts, whatever the noise: clocks and placement differ between runs
NOISE_SIGMAS = 3.0
MIN_STEPS = 3
TOP_KERNELS = 10  # kernels of each phase gated (by baseline time per step)
MIN_IMPACT = 0.01  # a kernel counts only if the time it adds is at least this share of its phase's step
_STEP_KEYS = ("rank", "generation", "step")


@dataclass(frozen=True)
class Figures:
    """What the gate compares of one run (or the median of several): per phase the median device time per step
    (ns), its noise allowance (relative) and step count; plain TPOT/TTFT and their allowance; per-step time of each
    kernel (with its allowance), layer and module (means over steps, ns)."""

    label: str
    phases: dict[str, tuple[float, float | None, int]]
    timings: dict[str, float | None]
    timing_noise: float | None
    kernels: pl.DataFrame  # phase, name, per_step_ns, noise
    layers: pl.DataFrame  # phase, layer, module, name, per_step_ns
    runs: int = 1


@dataclass(frozen=True)
class Check:
    """One compared figure: its value in both, the relative change, the threshold it was held to."""

    metric: str  # "device time per step", "TPOT", "TTFT", "kernel time per step"
    phase: str | None
    subject: str | None  # the kernel's name for kernel checks
    unit: str  # "ns" or "ms"
    baseline: float
    candidate: float
    threshold: float

    @property
    def change(self) -> float:
        return self.candidate / self.baseline - 1 if self.baseline else math.inf

    @property
    def regressed(self) -> bool:
        return self.change > self.threshold

    @property
    def improved(self) -> bool:
        return self.change < -self.threshold


@dataclass(frozen=True)
class Culprit:
    """A kernel (or a layer) that added time per step in a phase, and where."""

    phase: str
    subject: str  # kernel name, or layer index as text
    baseline_ns: float
    candidate_ns: float
    where: list[tuple[str, float]] = field(default_factory=list)  # layers (of a kernel) or modules (of a layer)
    places: int = 0  # layers or modules that added time, of which `where` names the largest

    @property
    def added_ns(self) -> float:
        return self.candidate_ns - self.baseline_ns


@dataclass(frozen=True)
class Verdict:
    checks: list[Check]
    kernels: list[Culprit]  # the kernels that added the most per step, per phase that grew
    layers: list[Culprit]
    notes: list[str]
    max_slowdown: float | None

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.checks)


def figures(label: str, run: Run) -> Figures:
    """A run's figures: per-step device time per phase from its kernels, timings from run.json."""
    kernels = run.kernels.filter(pl.col("dur_ns").is_not_null())
    repeat_noise = _repeat_noise(run.info.plain_timings.e2e_ms_all)
    per_step = (kernels.group_by("phase", *_STEP_KEYS).agg(pl.col("dur_ns").sum().alias("ns"))
                .sort("phase", *_STEP_KEYS, nulls_last=True))
    phases = {}
    for (phase,), steps in per_step.group_by("phase", maintain_order=True):
        values = steps["ns"].cast(pl.Float64).to_list()
        noise = _step_allowance(values) if len(values) >= MIN_STEPS else repeat_noise
        phases[str(phase)] = (_median(values), noise, len(values))
    counts = per_step.group_by("phase").agg(pl.len().alias("steps"))
    per_kernel_step = kernels.group_by("phase", "name", *_STEP_KEYS).agg(pl.col("dur_ns").sum().alias("ns"))
    kernel_table = (per_kernel_step.sort("phase", "name", *_STEP_KEYS, nulls_last=True)
                    .group_by("phase", "name", maintain_order=True)
                    .agg(pl.col("ns").sum().alias("total"), pl.col("ns").alias("values"))
                    .join(counts, on="phase")
                    .select("phase", "name", (pl.col("total") / pl.col("steps")).alias("per_step_ns"),
                            pl.col("values").map_elements(_kernel_noise, return_dtype=pl.Float64).alias("noise")))
    layers = (kernels.group_by("phase", "layer", "module", "name").agg(pl.col("dur_ns").sum().alias("total"))
              .join(counts, on="phase")
              .select("phase", "layer", "module", "name", (pl.col("total") / pl.col("steps")).alias("per_step_ns")))
    timings = {"TPOT": run.info.plain_timings.tpot_ms, "TTFT": run.info.plain_timings.ttft_ms}
    return Figures(label=label, phases=phases, timings=timings, timing_noise=repeat_noise, kernels=kernel_table,
                   layers=layers)


def combine(label: str, runs: list[Figures]) -> Figures:
    """Several baseline runs as one: medians of their figures, noise widened by their spread; kernel and layer
    times are means over the runs (a kernel a run lacks counts 0 there)."""
    if len(runs) == 1:
        return runs[0]
    phases = {}
    for phase in dict.fromkeys(p for r in runs for p in r.phases):
        values = [r.phases[phase][0] for r in runs if phase in r.phases]
        noises = [r.phases[phase][1] for r in runs if phase in r.phases and r.phases[phase][1] is not None]
        phases[phase] = (_median(values), max([*noises, _spread(values)]),
                         min(r.phases[phase][2] for r in runs if phase in r.phases))
    timings: dict[str, float | None] = {}
    for key in runs[0].timings:
        values = [r.timings[key] for r in runs if r.timings.get(key) is not None]
        timings[key] = _median(values) if values else None
    spreads = [_spread([v for r in runs if (v := r.timings.get(k)) is not None]) for k in timings]
    noises = [r.timing_noise for r in runs if r.timing_noise is not None]
    count = len(runs)
    kernels = (pl.concat([r.kernels for r in runs]).group_by("phase", "name")
               .agg((pl.col("per_step_ns").sum() / count).alias("per_step_ns"), pl.col("noise").max()))
    layers = (pl.concat([r.layers for r in runs]).group_by("phase", "layer", "module", "name")
              .agg((pl.col("per_step_ns").sum() / count).alias("per_step_ns")))
    return Figures(label=label, phases=phases, timings=timings, timing_noise=max([*noises, *spreads], default=None),
                   kernels=kernels, layers=layers, runs=count)


def check(baseline: Figures, candidate: Figures, max_slowdown: float | None = None) -> Verdict:
    """Compare `candidate` with `baseline`; `max_slowdown` (a fraction) replaces the noise-aware thresholds."""
    checks, notes = [], []

    def threshold(*allowances: float | None) -> float:
        if max_slowdown is not None:
            return max_slowdown
        return max([FLOOR, *(a for a in allowances if a is not None)])

    for phase, (base, base_noise, base_steps) in baseline.phases.items():
        if phase not in candidate.phases:
            notes.append(f"phase {phase} of the baseline is not in the candidate")
            continue
        cand, cand_noise, cand_steps = candidate.phases[phase]
        if base_steps != cand_steps:
            notes.append(f"phase {phase}: {base_steps} steps in the baseline, {cand_steps} in the candidate")
        if base > 0:
            checks.append(Check("device time per step", phase, None, "ns", base, cand, threshold(base_noise, cand_noise)))
    notes += [f"phase {p} is new in the candidate" for p in candidate.phases if p not in baseline.phases]
    for key, base_value in baseline.timings.items():
        cand_value = candidate.timings.get(key)
        if base_value and cand_value is not None:
            checks.append(Check(key, None, None, "ms", base_value, cand_value,
                                threshold(baseline.timing_noise, candidate.timing_noise)))
        elif base_value or cand_value:
            notes.append(f"{key}: measured in only one of the runs (imports have no unprofiled timings)")
    checks += _kernel_checks(baseline, candidate, threshold)
    grown = {c.phase for c in checks if c.regressed and c.phase is not None}
    return Verdict(checks=checks, kernels=_culprit_kernels(baseline, candidate, grown),
                   layers=_culprit_layers(baseline, candidate, grown), notes=notes, max_slowdown=max_slowdown)


def _kernel_checks(baseline: Figures, candidate: Figures, threshold) -> list[Check]:
    checks = []
    for phase, (base_step, base_noise, _) in baseline.phases.items():
        if phase not in candidate.phases:
            continue
        phase_threshold = threshold(base_noise, candidate.phases[phase][1])
        top = (baseline.kernels.filter(pl.col("phase") == phase).sort("per_step_ns", descending=True)
               .head(TOP_KERNELS))
        theirs = candidate.kernels.filter(pl.col("phase") == phase).select("name", "per_step_ns", "noise")
        joined = top.join(theirs, on="name", how="left", suffix="_candidate")
        for row in joined.iter_rows(named=True):
            base, cand = row["per_step_ns"], row["per_step_ns_candidate"] or 0.0
            if base <= 0 or cand - base < MIN_IMPACT * base_step:
                continue  # too small a part of the step to fail a build on
            checks.append(Check("kernel time per step", phase, row["name"], "ns", base, cand,
                                max(phase_threshold, threshold(row["noise"], row["noise_candidate"]))))
    return checks


def _culprit_kernels(baseline: Figures, candidate: Figures, phases: set[str], top: int = 5) -> list[Culprit]:
    out = []
    for phase in sorted(phases):
        added = _added(baseline.kernels, candidate.kernels, phase, ["name"]).head(top)
        for row in added.iter_rows(named=True):
            layers = _added(baseline.layers, candidate.layers, phase, ["layer"],
                            pl.col("name") == row["name"]).filter(pl.col("added") > 0)
            out.append(Culprit(phase, row["name"], row["base"], row["cand"], _where(layers, "layer"), layers.height))
    return out


def _culprit_layers(baseline: Figures, candidate: Figures, phases: set[str], top: int = 5) -> list[Culprit]:
    out = []
    for phase in sorted(phases):
        added = _added(baseline.layers, candidate.layers, phase, ["layer"], pl.col("layer").is_not_null()).head(top)
        for row in added.filter(pl.col("added") > 0).iter_rows(named=True):
            modules = _added(baseline.layers, candidate.layers, phase, ["module"],
                             pl.col("layer") == row["layer"]).filter(pl.col("added") > 0)
            out.append(Culprit(phase, str(row["layer"]), row["base"], row["cand"], _where(modules, "module"),
                               modules.height))
    return out


def _added(base: pl.DataFrame, cand: pl.DataFrame, phase: str, keys: list[str],
           condition: pl.Expr | None = None) -> pl.DataFrame:
    """Per key: per-step time in both and the time added, largest first."""
    def totals(table: pl.DataFrame, name: str) -> pl.DataFrame:
        rows = table.filter(pl.col("phase") == phase)
        if condition is not None:
            rows = rows.filter(condition)
        return rows.group_by(keys).agg(pl.col("per_step_ns").sum().alias(name))

    joined = totals(base, "base").join(totals(cand, "cand"), on=keys, how="full", coalesce=True, nulls_equal=True)
    return (joined.with_columns(pl.col("base").fill_null(0.0), pl.col("cand").fill_null(0.0))
            .with_columns((pl.col("cand") - pl.col("base")).alias("added"))
            .sort("added", *keys, descending=[True] + [False] * len(keys), nulls_last=True))


def _where(table: pl.DataFrame, key: str, top: int = 3) -> list[tuple[str, float]]:
    return [(f"no {key}" if row[key] is None else str(row[key]), row["added"])
            for row in table.head(top).iter_rows(named=True)]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _step_allowance(values: list[float]) -> float | None:
    """NOISE_SIGMAS robust standard deviations of one step, from successive differences, relative to the median
    step."""
    if len(values) < 2:
        return None
    middle = _median(values)
    if middle <= 0:
        return None
    differences = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    return NOISE_SIGMAS * 1.4826 * _median(differences) / math.sqrt(2) / middle


def _kernel_noise(values: pl.Series) -> float | None:
    return _step_allowance(values.cast(pl.Float64).to_list()) if len(values) >= MIN_STEPS else None


def _repeat_noise(e2e_all: list[float]) -> float | None:
    """Half the range of the unprofiled repeats, relative to their median (None with fewer than two)."""
    values = [v for v in e2e_all if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return None
    return _spread(values)


def _spread(values: list[float]) -> float:
    middle = _median(values)
    return (max(values) - min(values)) / 2 / middle if len(values) > 1 and middle > 0 else 0.0
