"""The GPU branch of the calibration timer, run on CPU with a stand-in for CUDA events (CI has no GPU, and a
typo there once broke `hw calibrate` and the engine benchmark on the device)."""

import time

import torch

from kernelscope.capture import calibrate


class FakeEvent:
    """Records the order of calls; each (start, end) pair spans the next duration from `durations` (ms)."""

    durations: list[float] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "FakeEvent") -> float:
        return FakeEvent.durations.pop(0)


def test_gpu_timer_reads_cuda_events_and_takes_the_median(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    FakeEvent.durations = [5.0, 1.0, 3.0]  # ms
    calls = []
    seconds = calibrate.median_seconds(lambda: calls.append(1), torch.device("cuda"), repeats=3, warmup=2)
    assert seconds == 3.0e-3
    assert len(calls) == 5  # warm-up calls, then the timed ones


def test_cpu_timer_uses_the_wall_clock():
    # A function that sleeps 20 ms takes at least that long by the wall clock (and far less than a second).
    seconds = calibrate.median_seconds(lambda: time.sleep(0.02), torch.device("cpu"), repeats=3, warmup=0)
    assert 0.02 <= seconds < 1.0
