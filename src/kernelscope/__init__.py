"""kernelscope: where an LLM inference spends its time, kernel by kernel.

`kernelscope.open_run(path)`, `kernelscope.open_runs(paths)`, `kernelscope.estimates(run)` and
`kernelscope.verdicts(baseline, candidate)` (docs/dataset.md) are loaded on first use, so that
importing the package, and the command line, stays light."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
_API = ("open_run", "open_runs", "connect_runs", "RunData", "estimates", "verdicts")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from kernelscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'kernelscope' has no attribute {name!r}")
