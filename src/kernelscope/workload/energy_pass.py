"""`profile --energy`: plain generations (no profiler, no ranges) while the board's energy counter and power are
sampled, and the window of every forward pass on the sampling clock.

A generation's marks are device events recorded at its start, at every forward pass and at its end
(workload.generation.StepClock). The GPU is idle when a generation starts (the last one synchronised), so its first
event runs as it is recorded: the host time taken just before the call places every later mark on the host clock
to within a launch's latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernelscope.capture.energy import EnergyMeter, PowerSampler, PowerSamples
from kernelscope.workload.session import WorkloadSession

SETUP, PREFILL, DECODE = "setup", "prefill", "decode"


@dataclass
class EnergyWindows:
    """One row per window: a generation's setup (before its first forward pass), its prefill and each decode step,
    on the samples' clock (ns). tokens: prompt tokens of the prefill, new tokens of a decode step (batch × 1)."""

    repeat: list[int] = field(default_factory=list)
    generation: list[int] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def add(self, repeat: int, generation: int, phase: str, step: int, start_ns: int, end_ns: int,
            tokens: int) -> None:
        for column, value in (("repeat", repeat), ("generation", generation), ("phase", phase), ("step", step),
                              ("start_ns", start_ns), ("end_ns", end_ns), ("tokens", tokens)):
            getattr(self, column).append(value)


@dataclass
class EnergyCapture:
    samples: PowerSamples
    windows: EnergyWindows
    started_ns: int  # the pass's first and last counter reads bound it
    ended_ns: int
    interval_s: float


def measure_energy(session: WorkloadSession, repeats: int, cuda_index: int, prompt_tokens: list[int],
                   advance) -> EnergyCapture:
    """`repeats` rounds of every generation of the session, sampled. prompt_tokens: per generation, the tokens its
    prefill reads (batch × prompt length)."""
    import torch

    meter = EnergyMeter(cuda_index)
    windows = EnergyWindows()
    torch.cuda.synchronize()
    sampler = PowerSampler(meter)
    try:
        sampler.start()
        started = time.perf_counter_ns()
        for repeat in range(repeats):
            for index in range(session.generations):
                torch.cuda.synchronize()
                host_start = time.perf_counter_ns()
                _, times = session.generate(index, annotated=False)
                _add_windows(windows, repeat, index, host_start, times.marks_ms, times.batch_size,
                             prompt_tokens[index])
                advance()
        torch.cuda.synchronize()
        ended = time.perf_counter_ns()
        samples = sampler.stop()
    finally:
        meter.close()
    return EnergyCapture(samples, windows, started, ended, sampler.interval_s)


def _add_windows(windows: EnergyWindows, repeat: int, generation: int, host_start: int, marks_ms: list[float],
                 batch: int, prompt_tokens: int) -> None:
    """marks: [start, forward 1 (prefill), forward 2 … forward N (decode), end] in ms from start."""
    at = [host_start + round(m * 1e6) for m in marks_ms]
    windows.add(repeat, generation, SETUP, 0, at[0], at[1], 0)
    windows.add(repeat, generation, PREFILL, 0, at[1], at[2], prompt_tokens)
    for step in range(1, len(at) - 2):
        windows.add(repeat, generation, DECODE, step, at[step + 1], at[step + 2], batch)
