"""Importing transformers for a workload without the optional libraries it would load for features no workload
uses. transformers (5.17, for one) imports scikit-learn, and with it SciPy, as soon as its generation code is
loaded, for one feature of assisted generation (a confidence threshold for candidate tokens); measured on the H100
machine that is 1.2-2.4 s of a profile's start (benchmarks/results/profile-startup-h100-2026-11-26)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

# Optional libraries transformers imports when they are installed, for features kernelscope's workloads never use.
UNUSED_OPTIONAL_MODULES = ("sklearn",)
# The modules of transformers that import them when loaded: loaded while they are hidden, they stay loaded.
LOADERS = ("transformers", "transformers.generation.candidate_generator")


@contextlib.contextmanager
def modules_hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, `names` look absent to imports and to importlib.util.find_spec (a None entry in
    sys.modules); afterwards they import as usual. A module imported already is left as it is."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def import_transformers() -> ModuleType:
    """transformers, its generation code loaded without UNUSED_OPTIONAL_MODULES (idempotent). Other code may
    still import those libraries afterwards (a checkpoint's own model code, say)."""
    if all(name in sys.modules for name in LOADERS):
        return sys.modules["transformers"]
    with modules_hidden(UNUSED_OPTIONAL_MODULES):
        for name in LOADERS:
            with contextlib.suppress(ImportError):  # a transformers without that module: nothing to load early
                importlib.import_module(name)
    return importlib.import_module("transformers")
