"""How freed memory goes back to the system: Polars' allocator, set before Polars loads, and glibc's heaps, trimmed
after the steps of an import that leave them full (trim_native_heap).

Polars allocates through jemalloc and, when it loads, sets jemalloc to keep freed pages for 0.5 s and then as
"muzzy" pages (still counted as resident) for another second, appending any options found in the variable below
(pola-rs/polars issue 18088). An import allocates and frees whole-table columns within a few seconds, so those
pages pile up: on a 1 GB trace the peak resident memory was 1.12 GB, 0.13 GB above what returning them gives.
Here muzzy pages are returned at once, and dirty ones after 150 ms, by a background thread (not on the thread doing
the work): returning them sooner cost import time. Together with the ops' argument columns held as
categories, an import's peak went 0.80 -> 0.67 GB on a 1 GB trace and 1.30 -> 1.11 GB on 2 GB, in the same time (2
cores, 2026-11-27, benchmarks/results/ingest-scaling-2026-11-27-categorical.json). The commands that hold whole
traces (import, profile; cli.py) set this; every other command (a report, made of many small tables, spent ~0.1 s
more in the kernel with the background thread) returns muzzy pages at once without it: a 2 GB run's report peaked at
1.40 GB instead of 1.55, in the same time (2026-11-27, benchmarks/results/report-speed-2026-11-27-e.json). Those
commands keep freed pages for 5 s rather than Polars' 0.5 s, so that a report's tables reuse the pages its earlier
tables freed instead of faulting in new ones. jemalloc reads the options once, when Polars loads: they only apply if
Polars has not been imported yet, and options the user set (the same variable) are kept as they are.
"""

from __future__ import annotations

import ctypes
import os
import sys

# tikv-jemallocator (Polars' allocator on Linux) reads its run-time options from this variable.
POLARS_ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
POLARS_ALLOCATOR_CONF = "background_thread:true,dirty_decay_ms:150,muzzy_decay_ms:0"  # commands that hold whole traces
TABLES_ALLOCATOR_CONF = "dirty_decay_ms:5000,muzzy_decay_ms:0"  # every other command


def configure_polars_allocator(conf: str = POLARS_ALLOCATOR_CONF) -> bool:
    """Set the allocator's options for this process and its helpers; False where it is too late (Polars is
    loaded) or the user chose their own."""
    if "polars" in sys.modules or POLARS_ALLOCATOR_ENV in os.environ:
        return False
    os.environ[POLARS_ALLOCATOR_ENV] = conf
    return True


# glibc's malloc serves NumPy's arrays and the native reader's buffers (Polars has its own allocator). Its heaps keep
# what is freed in them, the decoding threads' arenas included, and glibc gives it back only from the top of each
# heap: after a 2 GB trace is read and attributed, a third of a gigabyte sat there through the rest of the import.
# malloc_trim(0) returns every arena's free pages; the import calls it after reading and after attributing a trace.


def _glibc() -> ctypes.CDLL | None:
    try:  # "glibc 2.36"; musl, macOS and Windows have no such value
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def trim_native_heap() -> bool:
    """Give glibc's free heap memory back to the system (every arena's); False where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
