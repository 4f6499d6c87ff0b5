"""The one interface between the engine and kernelscope: a kernel launch declares its exact cost.

In a profiled run each declaration is a profiler range around the launch, named
`ks.cost|<kernel>|flops=<n>|bytes=<n>|precision=<roof>`; attribution makes it the kernel's innermost op and the
cost analysis reads the numbers from the name (docs/engine.md). Outside a profiled run it costs one check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

PREFIX = "ks.cost|"


def cost_range_name(kernel: str, flops: int, nbytes: int, precision: str) -> str:
    return f"{PREFIX}{kernel}|flops={int(flops)}|bytes={int(nbytes)}|precision={precision}"


def parse_cost_range(name: str) -> tuple[str, float, float, str] | None:
    """(kernel, flops, bytes, precision) from a range name, or None when the name is not a cost declaration."""
    if not name.startswith(PREFIX):
        return None
    kernel, *fields = name[len(PREFIX):].split("|")
    values = dict(field.split("=", 1) for field in fields if "=" in field)
    try:
        return kernel, float(values["flops"]), float(values["bytes"]), values.get("precision", "fp32")
    except (KeyError, ValueError):
        return None


@contextlib.contextmanager
def declare(kernel: str, flops: int, nbytes: int, precision: str) -> Iterator[None]:
    """Wrap one kernel launch: `with declare("ks_gemv", 2*n*k, bytes, "bf16"): launch(...)`."""
    if not torch.autograd.profiler._is_profiler_enabled:
        yield
        return
    with torch.autograd.profiler.record_function(cost_range_name(kernel, flops, nbytes, precision)):
        yield
