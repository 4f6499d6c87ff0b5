"""The cyclic garbage collector paused around bulk work that makes many objects and no reference cycles (decoding a
trace chunk, classifying kernel names): each collection those allocations trigger walks every object alive, again
and again as the work's own results grow."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
