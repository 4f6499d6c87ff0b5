"""One definition per metric and one verdict rule: what report, compare, check and the Python API say about a
run's timings, their noise and a change between two runs all comes from here (the rule: data/noise.toml;
docs/compare.md, "Noise").

A metric is a statistic (median or mean, said in its label) over repeats: the unprofiled timed generations of
run.json for TTFT, TPOT, tokens/s and end to end (medians), or the steps of a phase for device time per step (the
mean: the total over the steps, as every per-step table adds up). A run's noise for a metric comes from that
metric's own repeats only: `sigmas` robust standard deviations of one repeat, from the differences between
successive repeats (1.4826 · median |Δ| / √2), relative to the metric's value; unknown with fewer than two.

The verdict on a change: change = candidate / baseline − 1, threshold = max(floor, the noise of either run where
known), or a fixed threshold where one is asked for. Beyond the threshold the candidate is worse or better (slower
or faster; for rates lower or higher), otherwise within noise. Where neither run's noise is known the floor alone
applies and the verdict says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl

from kernelscope import ranges
from kernelscope.contracts.run_info import PROFILE, RunInfo
from kernelscope.contracts.summary import MetricNoise, NoiseSummary
from kernelscope.load import knowledge

_STEP_KEYS = ("rank", "generation", "step")


@dataclass(frozen=True)
class Metric:
    key: str
    statistic: str  # "median" or "mean": how the value is made from the repeats
    unit: str  # "ms", "tokens/s" or "ns"
    higher_is_better: bool = False


TTFT = Metric("ttft_ms", "median", "ms")
TPOT = Metric("tpot_ms", "median", "ms")
E2E = Metric("e2e_ms", "median", "ms")
TOKENS_PER_S = Metric("tokens_per_s", "median", "tokens/s", higher_is_better=True)
DECODE_TOKENS_PER_S = Metric("decode_tokens_per_s", "median", "tokens/s", higher_is_better=True)
STEP_TIME = Metric("device_time_per_step", "mean", "ns")
KERNEL_STEP_TIME = Metric("kernel_time_per_step", "mean", "ns")
TIMING_METRICS = (TTFT, TPOT, TOKENS_PER_S, DECODE_TOKENS_PER_S, E2E)

# Where a metric's noise came from (Estimate.source).
FROM_REPEATS = "repeats"  # its own timed repeats
FROM_STEPS = "steps"  # the steps of its phase
FROM_E2E = "end-to-end repeats"  # runs kept no per-token repeats then: the end-to-end repeats' relative noise
FROM_RUNS = "runs"  # a baseline of several runs: also their spread
NO_NOISE = "none"


def rule() -> dict[str, float]:
    return knowledge.noise_rule()


def floor() -> float:
    return rule()["floor_pct"] / 100.0


@dataclass(frozen=True)
class Estimate:
    """A metric of one run: its value, the repeats it was made from and its noise (relative; None: unknown)."""

    metric: Metric
    value: float | None
    repeats: tuple[float, ...] = ()
    noise: float | None = None
    source: str = NO_NOISE

    @property
    def n(self) -> int:
        return len(self.repeats)

    @property
    def min(self) -> float | None:
        return min(self.repeats) if self.repeats else None

    @property
    def max(self) -> float | None:
        return max(self.repeats) if self.repeats else None

    @property
    def cv(self) -> float | None:
        return coefficient_of_variation(self.repeats)

    @property
    def noisy(self) -> bool:
        cv = self.cv
        return cv is not None and cv > rule()["noisy_cv_pct"] / 100.0


def finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean; None with fewer than two values or a zero mean."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


def allowance(values: Sequence[float], centre: float | None) -> float | None:
    """`sigmas` robust standard deviations of one repeat (from successive differences) relative to `centre`."""
    if len(values) < 2 or not centre or centre <= 0:
        return None
    differences = [abs(b - a) for a, b in zip(values, values[1:], strict=False)]
    return rule()["sigmas"] * 1.4826 * statistics.median(differences) / math.sqrt(2) / centre


def estimate(metric: Metric, values: Iterable[float | None], value: float | None = None,
             source: str = FROM_REPEATS) -> Estimate:
    """The metric over `values` (in the order they were measured); `value`: the run's recorded statistic, where it
    has one (otherwise the median or mean of the values)."""
    xs = finite(values)
    if value is None and xs:
        value = statistics.median(xs) if metric.statistic == "median" else statistics.fmean(xs)
    noise = allowance(xs, value) if value is not None else None
    return Estimate(metric, value, tuple(xs), noise, source if noise is not None else NO_NOISE)


# --- a run's metrics ----------------------------------------------------------------------------------------


def timing_estimates(info: RunInfo) -> dict[str, Estimate]:
    """TTFT, TPOT, tokens/s (end to end and in decode) and end to end of the unprofiled plain runs, each from its
    own repeats. Tokens/s repeats are the repeats of the time they divide (their tokens are fixed). Runs made before
    per-token repeats were kept give TPOT and decode tokens/s the end-to-end repeats' relative noise (said as such)
    and TTFT none."""
    plain = info.plain_timings
    e2e = estimate(E2E, plain.e2e_ms_all, plain.e2e_ms)
    out = {E2E.key: e2e, TTFT.key: estimate(TTFT, plain.ttft_ms_all, plain.ttft_ms)}
    tokens = plain.tokens_per_s * plain.e2e_ms / 1e3 if plain.tokens_per_s and plain.e2e_ms else None
    out[TOKENS_PER_S.key] = estimate(TOKENS_PER_S, [tokens * 1e3 / e for e in e2e.repeats if e > 0] if tokens else [],
                                     plain.tokens_per_s)
    batch = plain.decode_tokens_per_s * plain.tpot_ms / 1e3 if plain.decode_tokens_per_s and plain.tpot_ms else None
    tpot_all = finite(plain.tpot_ms_all)
    out[TPOT.key] = estimate(TPOT, tpot_all, plain.tpot_ms)
    out[DECODE_TOKENS_PER_S.key] = estimate(DECODE_TOKENS_PER_S,
                                            [batch * 1e3 / t for t in tpot_all if t > 0] if batch else [],
                                            plain.decode_tokens_per_s)
    if not tpot_all and e2e.noise is not None:  # an older run: per-token repeats were not kept
        for metric in (TPOT, DECODE_TOKENS_PER_S):
            known = out[metric.key]
            if known.value is not None:
                out[metric.key] = Estimate(metric, known.value, (), e2e.noise, FROM_E2E)
    return {m.key: out[m.key] for m in TIMING_METRICS}


def step_times(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase, rank, generation and step (in that order): the summed durations of its kernels (ns)."""
    return (kernels.filter(pl.col("dur_ns").is_not_null())
            .group_by("phase", *_STEP_KEYS).agg(pl.col("dur_ns").sum().cast(pl.Float64).alias("ns"))
            .sort("phase", *_STEP_KEYS, nulls_last=True))


def step_estimates(kernels: pl.DataFrame, per_step: dict[str, float | None] | None = None,
                   metric: Metric = STEP_TIME) -> dict[str, Estimate]:
    """Per phase: device time per step (the mean over its steps), its noise from the steps where the phase has
    `min_steps` or more. `per_step`: the phase table's per-step values, where the caller has them (they count a
    step of several ranks once)."""
    out = {}
    for (phase,), steps in step_times(kernels).group_by("phase", maintain_order=True):
        values = steps["ns"].to_list()
        value = (per_step or {}).get(str(phase))
        if len(values) < rule()["min_steps"]:
            mean = value if value is not None else statistics.fmean(values)
            out[str(phase)] = Estimate(metric, mean, tuple(values))
            continue
        # The noise is relative: from the steps' own mean, whatever the phase table counts as one step.
        noise = allowance(values, statistics.fmean(values))
        out[str(phase)] = Estimate(metric, value if value is not None else statistics.fmean(values), tuple(values),
                                   noise, FROM_STEPS if noise is not None else NO_NOISE)
    return out


def combined(estimates: list[Estimate]) -> Estimate:
    """Several runs' estimates of one metric as one baseline: the median of their values, noise widened by their
    own spread around it (half their range, relative)."""
    known = [e for e in estimates if e.value is not None]
    if len(known) <= 1:
        return known[0] if known else estimates[0]
    values = [e.value for e in known]
    middle = statistics.median(values)
    noises = [e.noise for e in known if e.noise is not None]
    spread = (max(values) - min(values)) / 2 / middle if middle > 0 else 0.0
    return Estimate(known[0].metric, middle, tuple(r for e in known for r in e.repeats), max([*noises, spread]),
                    FROM_RUNS)


# --- the verdict ---------------------------------------------------------------------------------------------

WORSE, BETTER, SAME = "worse", "better", "within noise"


@dataclass(frozen=True)
class Verdict:
    """A change of one metric from a baseline to a candidate, and the threshold it was held to."""

    metric: Metric
    baseline: float
    candidate: float
    threshold: float
    noise_known: bool  # False: neither run's noise is known, the floor alone applied
    fixed: bool = False  # a threshold asked for (check --max-slowdown) replaced the rule

    @property
    def change(self) -> float:
        return self.candidate / self.baseline - 1 if self.baseline else math.inf

    @property
    def ratio(self) -> float | None:
        return self.candidate / self.baseline if self.baseline else None

    @property
    def status(self) -> str:
        if abs(self.change) <= self.threshold:
            return SAME
        up = self.change > 0
        return BETTER if up == self.metric.higher_is_better else WORSE

    @property
    def regressed(self) -> bool:
        return self.status == WORSE

    @property
    def improved(self) -> bool:
        return self.status == BETTER

    @property
    def basis(self) -> str:
        """What set the threshold: "fixed" (asked for), "noise" (a run's noise, above the floor), "floor" (the
        runs' noise is below it) or "floor only" (neither run's noise is known)."""
        if self.fixed:
            return "fixed"
        if not self.noise_known:
            return "floor only"
        return "noise" if self.threshold > floor() else "floor"

    @property
    def direction(self) -> str:
        """How the candidate moved, in the metric's words: slower/faster for times, lower/higher for rates, or
        within noise."""
        if self.status == SAME:
            return SAME
        if self.metric.higher_is_better:
            return "higher" if self.change > 0 else "lower"
        return "slower" if self.change > 0 else "faster"


def judge(baseline: Estimate, candidate: Estimate, fixed: float | None = None) -> Verdict | None:
    """The verdict on candidate against baseline (None when either has no value or the baseline is 0)."""
    if baseline.value is None or candidate.value is None or not baseline.value:
        return None
    noises = [e.noise for e in (baseline, candidate) if e.noise is not None]
    if fixed is not None:
        return Verdict(baseline.metric, baseline.value, candidate.value, fixed, bool(noises), fixed=True)
    return Verdict(baseline.metric, baseline.value, candidate.value, max([floor(), *noises]), bool(noises))


# --- comparability -------------------------------------------------------------------------------------------

# What must be equal for two runs' timings to compare like for like: (key, how to read it from run.json).
COMPARABLE_ITEMS = ("model", "device", "dtype", "batch_size", "prompt_len")


def setup_of(info: RunInfo) -> dict[str, object]:
    workload = info.workload
    return {
        "model": workload.model if workload is not None else None,
        "device": info.hardware.name,
        "dtype": workload.dtype if workload is not None else None,
        "batch_size": workload.batch_size if workload is not None else None,
        "prompt_len": workload.prompt_len if workload is not None else None,
    }


@dataclass(frozen=True)
class Difference:
    item: str  # one of COMPARABLE_ITEMS
    values: tuple[object, ...]  # per run, baseline first


def differences(infos: list[RunInfo]) -> list[Difference]:
    """The items of COMPARABLE_ITEMS in which the runs differ (an item a run does not record is left out)."""
    setups = [setup_of(info) for info in infos]
    out = []
    for item in COMPARABLE_ITEMS:
        values = tuple(s[item] for s in setups)
        if all(v is not None for v in values) and len({str(v) for v in values}) > 1:
            out.append(Difference(item, values))
    return out


# --- a noisy run ---------------------------------------------------------------------------------------------

# summary.json `noise.metrics` keys of the timings, and of the decode steps (in µs, as summary.json's times).
DECODE_STEP_KEY = "decode_step_us"


def noise_summary(info: RunInfo, kernels: pl.DataFrame, per_step: dict[str, float | None] | None = None
                  ) -> NoiseSummary | None:
    """How much each timing varied over its repeats and, on runs kernelscope profiled, the decode steps (an
    imported trace's steps are a serving engine's, whose sizes differ by design); None when nothing was repeated."""
    metrics: dict[str, MetricNoise] = {}
    for key, e in timing_estimates(info).items():
        if e.n >= 2:
            metrics[key] = _metric_noise(e, 1.0)
    if info.source == PROFILE:
        decode = step_estimates(kernels, per_step).get(ranges.DECODE)
        if decode is not None and decode.n >= rule()["min_steps"]:
            metrics[DECODE_STEP_KEY] = _metric_noise(decode, 1e-3)
    if not metrics:
        return None
    return NoiseSummary(noisy=any(m.noisy for m in metrics.values()), noisy_cv_pct=rule()["noisy_cv_pct"],
                        metrics=metrics)


def _metric_noise(e: Estimate, scale: float) -> MetricNoise:
    cv = e.cv
    return MetricNoise(statistic=e.metric.statistic, value=float(e.value) * scale, repeats=e.n,
                       min=float(e.min) * scale, max=float(e.max) * scale,
                       cv_pct=None if cv is None else 100.0 * cv,
                       allowance_pct=None if e.noise is None else 100.0 * e.noise, noisy=e.noisy)
