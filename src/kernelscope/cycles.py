"""The cyclic garbage collector paused around bulk work that makes many objects and no reference cycles (decoding a
trace chunk, classifying kernel names): each collection those allocations trigger walks every object alive, again
and again as the work's own results grow. Pauses may overlap (decode threads): the collector runs again, if it
ran before the first, once the last one ends."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0  # pauses under way
_enabled_before = False  # whether the collector ran when the first of them began


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    global _pauses, _enabled_before
    with _lock:
        if _pauses == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _enabled_before:
                gc.enable()
