"""What the benchmarks measure of a process tree while it runs."""

from __future__ import annotations

import contextlib
import time

import psutil


def peak_rss_until_exit(proc: psutil.Popen, interval_s: float = 0.02) -> int:
    """The largest summed resident memory of `proc` and its descendants, sampled until it exits."""
    peak = 0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
        time.sleep(interval_s)
    return peak
