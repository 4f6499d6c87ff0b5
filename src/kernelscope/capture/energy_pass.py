"""`profile --energy`: plain generations (no profiler, no ranges) while the board's energy counter and power are
sampled, and the window of every forward pass on the sampling clock. Two stages, each of at least `--repeats` rounds
and ISOLATION_S, so that the counter, which updates far more slowly than a prefill lasts, measures each over many of
its updates: generations of one new token (setup and prefill alone), then the full generations.

A generation's marks are device events recorded at its start, at every forward pass and at its end
(workload.generation.StepClock). The GPU is idle when a generation starts (the last one synchronised), so its first
event runs as it is recorded: the host time taken just before the call places every later mark on the host clock
to within a launch's latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernelscope.capture.energy import EnergyMeter, PowerSampler, PowerSamples
from kernelscope.contracts.energy_tables import DECODE, GENERATION, PREFILL, PREFILL_ONLY, SETUP, StageBounds
from kernelscope.workload.session import WorkloadSession

ISOLATION_S = 1.5  # the prefill-only stage lasts at least this long (the H200's counter updated every ~100 ms)


@dataclass
class EnergyWindows:
    """One row per window: a generation's setup (before its first forward pass), its prefill and each decode step,
    on the samples' clock (ns). tokens: prompt tokens of the prefill, new tokens of a decode step (batch × 1)."""

    stage: list[str] = field(default_factory=list)
    repeat: list[int] = field(default_factory=list)
    generation: list[int] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def add(self, stage: str, repeat: int, generation: int, phase: str, step: int, start_ns: int, end_ns: int,
            tokens: int) -> None:
        for column, value in (("stage", stage), ("repeat", repeat), ("generation", generation), ("phase", phase), ("step", step),
                              ("start_ns", start_ns), ("end_ns", end_ns), ("tokens", tokens)):
            getattr(self, column).append(value)


@dataclass
class EnergyCapture:
    samples: PowerSamples
    windows: EnergyWindows
    stages: list[StageBounds]
    interval_s: float


def measure_energy(session: WorkloadSession, prefill_session: WorkloadSession, repeats: int, cuda_index: int,
                   prompt_tokens: list[int], advance) -> EnergyCapture:
    """The prefill-only stage (prefill_session: the same generations with one new token), then the session's full
    generations, each for at least `repeats` rounds and ISOLATION_S, sampled throughout.
    prompt_tokens: per generation, the tokens its prefill reads (batch × prompt length)."""
    import torch

    meter = EnergyMeter(cuda_index)
    windows = EnergyWindows()
    stages: list[StageBounds] = []
    torch.cuda.synchronize()
    sampler = PowerSampler(meter)
    try:
        sampler.start()
        for stage, runner in ((PREFILL_ONLY, prefill_session), (GENERATION, session)):
            started, done, repeat = time.perf_counter_ns(), 0, 0
            while repeat < repeats or time.perf_counter_ns() - started < ISOLATION_S * 1e9:
                for index in range(runner.generations):
                    torch.cuda.synchronize()
                    host_start = time.perf_counter_ns()
                    _, times = runner.generate(index, annotated=False)
                    _add_windows(windows, stage, repeat, index, host_start, times.marks_ms, times.batch_size,
                                 prompt_tokens[index])
                    done += 1
                    if stage == GENERATION and repeat < repeats:
                        advance()
                repeat += 1
            torch.cuda.synchronize()
            stages.append(StageBounds(stage, started, time.perf_counter_ns(), done))
        samples = sampler.stop()
    finally:
        meter.close()
    return EnergyCapture(samples, windows, stages, sampler.interval_s)


def _add_windows(windows: EnergyWindows, stage: str, repeat: int, generation: int, host_start: int,
                 marks_ms: list[float], batch: int, prompt_tokens: int) -> None:
    """marks: [start, forward 1 (prefill), forward 2 … forward N (decode), end] in ms from start."""
    at = [host_start + round(m * 1e6) for m in marks_ms]
    windows.add(stage, repeat, generation, SETUP, 0, at[0], at[1], 0)
    windows.add(stage, repeat, generation, PREFILL, 0, at[1], at[2], prompt_tokens)
    for step in range(1, len(at) - 2):
        windows.add(stage, repeat, generation, DECODE, step, at[step + 1], at[step + 2], batch)
