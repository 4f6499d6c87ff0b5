"""Whether the native Kineto reader is here, known without loading it (nor Polars): commands decide early, while
their libraries load, whether a large trace will need helper processes."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

NATIVE_ENV = "KERNELSCOPE_NATIVE_READER"  # "0": decode every chunk with msgspec (to compare, or to rule it out)
_EXTENSION = Path(__file__).parent / "kineto" / "_kineto_scan"


def native_reader_built() -> bool:
    """The extension file is installed and not switched off. (One that fails to load still leaves the msgspec
    path, which starts its helpers when it needs them.)"""
    if os.environ.get(NATIVE_ENV) == "0":
        return False
    return any(_EXTENSION.with_name(_EXTENSION.name + suffix).is_file()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)
