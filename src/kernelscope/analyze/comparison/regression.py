"""A regression gate: does a run's device time per step, TPOT or TTFT, or the time of its top kernels, exceed a
baseline's by more than the runs' noise? (docs/dataset.md, "kernelscope check", states the rule.)

Every figure is a metric of analyze/comparison/metrics.py, judged by its one verdict rule: the change against
max(floor, the noise of either run), each run's noise from that metric's own repeats (a phase's steps, a kernel's
time in each step, TPOT's and TTFT's timed repeats); a baseline of several runs also allows their own spread.
--max-slowdown replaces the threshold. Device time per step is the mean over the phase's steps, as in the report
and `compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.metrics import Estimate, Verdict
from kernelscope.contracts.run import Run

TOP_KERNELS = 10  # kernels of each phase gated (by baseline time per step)
MIN_IMPACT = 0.01  # a kernel counts only if the time it adds is at least this share of its phase's step
_STEP_KEYS = ("rank", "generation", "step")


@dataclass(frozen=True)
class Figures:
    """What the gate compares of one run (or the median of several): per phase the mean device time per step (an
    Estimate, ns, with its noise and steps); TPOT and TTFT (Estimates of the plain timed repeats); per-step time
    of each kernel (with its noise), layer and module (means over steps, ns)."""

    label: str
    phases: dict[str, Estimate]
    timings: dict[str, Estimate]
    kernels: pl.DataFrame  # phase, name, per_step_ns, noise
    layers: pl.DataFrame  # phase, layer, module, name, per_step_ns
    runs: int = 1


@dataclass(frozen=True)
class Check:
    """One compared figure and its verdict (the metric's rule, metrics.judge)."""

    metric: str  # "mean device time per step", "TPOT", "TTFT", "kernel time per step"
    phase: str | None
    subject: str | None  # the kernel's name for kernel checks
    unit: str  # "ns" or "ms"
    verdict: Verdict

    @property
    def baseline(self) -> float:
        return self.verdict.baseline

    @property
    def candidate(self) -> float:
        return self.verdict.candidate

    @property
    def threshold(self) -> float:
        return self.verdict.threshold

    @property
    def change(self) -> float:
        return self.verdict.change

    @property
    def regressed(self) -> bool:
        return self.verdict.regressed

    @property
    def improved(self) -> bool:
        return self.verdict.improved


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
class Verdicts:
    checks: list[Check]
    kernels: list[Culprit]  # the kernels that added the most per step, per phase that grew
    layers: list[Culprit]
    notes: list[str]
    max_slowdown: float | None

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.checks)


STEP_METRIC = "mean device time per step"
TIMING_LABELS = {"TPOT": metrics.TPOT.key, "TTFT": metrics.TTFT.key}


def figures(label: str, run: Run) -> Figures:
    """A run's figures: per-step device time per phase from its kernels, timings from run.json."""
    kernels = run.kernels.filter(pl.col("dur_ns").is_not_null())
    from kernelscope.analyze.structure.phases import phase_table

    per_step = {row["phase"]: row["device_time_per_step_ns"] for row in phase_table(kernels).iter_rows(named=True)}
    phases = metrics.step_estimates(kernels, per_step)
    timings = metrics.timing_estimates(run.info)
    counts = metrics.step_times(kernels).group_by("phase").agg(pl.len().alias("steps"))
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
    return Figures(label=label, phases=phases, timings={name: timings[key] for name, key in TIMING_LABELS.items()},
                   kernels=kernel_table, layers=layers)


def combine(label: str, runs: list[Figures]) -> Figures:
    """Several baseline runs as one: medians of their figures, noise widened by their spread; kernel and layer
    times are means over the runs (a kernel a run lacks counts 0 there)."""
    if len(runs) == 1:
        return runs[0]
    phases = {phase: metrics.combined([r.phases[phase] for r in runs if phase in r.phases])
              for phase in dict.fromkeys(p for r in runs for p in r.phases)}
    timings = {key: metrics.combined([r.timings[key] for r in runs]) for key in runs[0].timings}
    count = len(runs)
    kernels = (pl.concat([r.kernels for r in runs]).group_by("phase", "name")
               .agg((pl.col("per_step_ns").sum() / count).alias("per_step_ns"), pl.col("noise").max()))
    layers = (pl.concat([r.layers for r in runs]).group_by("phase", "layer", "module", "name")
              .agg((pl.col("per_step_ns").sum() / count).alias("per_step_ns")))
    return Figures(label=label, phases=phases, timings=timings, kernels=kernels, layers=layers, runs=count)


def check(baseline: Figures, candidate: Figures, max_slowdown: float | None = None) -> Verdicts:
    """Compare `candidate` with `baseline`; `max_slowdown` (a fraction) replaces the noise-aware thresholds."""
    checks, notes = [], []
    for phase, base in baseline.phases.items():
        if phase not in candidate.phases:
            notes.append(f"phase {phase} of the baseline is not in the candidate")
            continue
        cand = candidate.phases[phase]
        if base.n != cand.n:
            notes.append(f"phase {phase}: {base.n} steps in the baseline, {cand.n} in the candidate")
        verdict = metrics.judge(base, cand, max_slowdown)
        if verdict is not None and base.value > 0:
            checks.append(Check(STEP_METRIC, phase, None, "ns", verdict))
    notes += [f"phase {p} is new in the candidate" for p in candidate.phases if p not in baseline.phases]
    for key, base in baseline.timings.items():
        cand = candidate.timings.get(key)
        verdict = metrics.judge(base, cand, max_slowdown) if cand is not None else None
        if verdict is not None:
            checks.append(Check(key, None, None, "ms", verdict))
        elif base.value or (cand is not None and cand.value):
            notes.append(f"{key}: measured in only one of the runs (imports have no unprofiled timings)")
    checks += _kernel_checks(baseline, candidate, max_slowdown)
    grown = {c.phase for c in checks if c.regressed and c.phase is not None}
    unknown = sorted({c.phase or c.metric for c in checks if not c.verdict.noise_known and not c.verdict.fixed
                      and c.subject is None})
    if unknown:
        notes.append("noise unknown (a single step or timed run on both sides), held to the floor alone: "
                     + ", ".join(unknown))
    return Verdicts(checks=checks, kernels=_culprit_kernels(baseline, candidate, grown),
                    layers=_culprit_layers(baseline, candidate, grown), notes=notes, max_slowdown=max_slowdown)


def _kernel_checks(baseline: Figures, candidate: Figures, max_slowdown: float | None) -> list[Check]:
    checks = []
    for phase, base_step in baseline.phases.items():
        if phase not in candidate.phases:
            continue
        phase_verdict = metrics.judge(base_step, candidate.phases[phase], max_slowdown)
        if phase_verdict is None:
            continue
        top = (baseline.kernels.filter(pl.col("phase") == phase).sort("per_step_ns", descending=True)
               .head(TOP_KERNELS))
        theirs = candidate.kernels.filter(pl.col("phase") == phase).select("name", "per_step_ns", "noise")
        joined = top.join(theirs, on="name", how="left", suffix="_candidate")
        for row in joined.iter_rows(named=True):
            base, cand = row["per_step_ns"], row["per_step_ns_candidate"] or 0.0
            if base <= 0 or cand - base < MIN_IMPACT * base_step.value:
                continue  # too small a part of the step to fail a build on
            verdict = metrics.judge(
                Estimate(metrics.KERNEL_STEP_TIME, base, noise=row["noise"]),
                Estimate(metrics.KERNEL_STEP_TIME, cand, noise=row["noise_candidate"]), max_slowdown)
            # A kernel is held to the larger of its own threshold and its phase's.
            verdict = Verdict(verdict.metric, base, cand, max(verdict.threshold, phase_verdict.threshold),
                              verdict.noise_known or phase_verdict.noise_known, verdict.fixed)
            checks.append(Check("kernel time per step", phase, row["name"], "ns", verdict))
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


def _kernel_noise(values: pl.Series) -> float | None:
    """A kernel's noise from its time in each step (metrics' rule), where the phase has enough steps."""
    xs = values.cast(pl.Float64).to_list()
    if len(xs) < metrics.rule()["min_steps"]:
        return None
    return metrics.allowance(xs, sum(xs) / len(xs))
