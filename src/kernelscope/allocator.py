"""How Polars' memory allocator gives freed memory back, set before Polars loads.

Polars allocates through jemalloc and, when it loads, sets jemalloc to keep freed pages for 0.5 s and then as
"muzzy" pages (still counted as resident) for another second, appending any options found in the variable below
(pola-rs/polars issue 18088). An import allocates and frees whole-table columns within a few seconds, so those
pages pile up: on a 2 GB trace the peak resident memory was ~0.2 GB above what the tables needed. A background
thread that returns dirty pages after 100 ms, and muzzy ones at once, keeps the peak closer to the live data at
no measurable cost in time (benchmarks/results/ingest-memory-2026-11-27.json); returning every page at once
(decay 0) cost ~15% of the time. jemalloc reads the options once, when Polars loads: they only apply if Polars
has not been imported yet, and options the user set (the same variable) are kept as they are.
"""

from __future__ import annotations

import os
import sys

# tikv-jemallocator (Polars' allocator on Linux) reads its run-time options from this variable.
POLARS_ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
POLARS_ALLOCATOR_CONF = "background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0"


def configure_polars_allocator() -> bool:
    """Set the allocator's options for this process and its helpers; False where it is too late (Polars is
    loaded) or the user chose their own."""
    if "polars" in sys.modules or POLARS_ALLOCATOR_ENV in os.environ:
        return False
    os.environ[POLARS_ALLOCATOR_ENV] = POLARS_ALLOCATOR_CONF
    return True
