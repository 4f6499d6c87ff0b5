"""The one interface between the engine and kernelscope: a kernel launch declares its exact cost (the range name's
format is kernelscope.ranges', shared with the analysis that reads it).

In a profiled run each declaration is a profiler range around the launch, named
`ks.cost|<kernel>|flops=<n>|bytes=<n>|precision=<roof>`; attribution makes it the kernel's innermost op and the
cost analysis reads the numbers from the name (docs/engine.md). Outside a profiled run it costs one check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from kernelscope import ranges

PREFIX = ranges.COST_PREFIX
cost_range_name = ranges.cost_range
parse_cost_range = ranges.parse_cost_range


@contextlib.contextmanager
def declare(kernel: str, flops: int, nbytes: int, precision: str) -> Iterator[None]:
    """Wrap one kernel launch: `with declare("ks_gemv", 2*n*k, bytes, "bf16"): launch(...)`."""
    if not torch.autograd.profiler._is_profiler_enabled:
        yield
        return
    with torch.autograd.profiler.record_function(cost_range_name(kernel, flops, nbytes, precision)):
        yield
