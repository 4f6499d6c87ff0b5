"""The processes of one recording as ranks: an Nsight Systems export of a multi-process job (`nsys profile
torchrun …`, `mpirun`) holds every process's kernels, runtime calls and ranges in one file, each tagged with its
process id. Each process that ran kernels is a rank of its own, attributed on its own and numbered by process id,
as the files of a multi-file import are; their collectives are then matched like any multi-rank run's
(analyze/ranks/communication.py). Their times share one clock already (one capture), so no offset is applied."""

from __future__ import annotations

import polars as pl

from kernelscope.contracts.trace import TraceTables

_CORRELATION_BITS = 32  # load/nsys_sqlite.py: with several processes, correlation = pid * 2**32 + correlationId


def _kernel_pid(tables: TraceTables) -> pl.Expr:
    return pl.col("correlation") // (1 << _CORRELATION_BITS)


def processes(tables: TraceTables) -> list[int]:
    """The process ids that ran device work, in order; none where the recording holds one process (its loader
    then keeps CUPTI's correlation ids as they are)."""
    if not tables.meta.correlation_encoding:
        return []
    return tables.kernels.select(_kernel_pid(tables).drop_nulls().unique().sort()).to_series().to_list()


def split_processes(tables: TraceTables) -> list[TraceTables]:
    """One TraceTables per process that ran device work (its kernels, launches and ranges); the recording itself
    where it holds one process. Ranges of processes that ran no kernel attribute nothing and are left out."""
    pids = processes(tables)
    if len(pids) < 2:
        return [tables]
    out = []
    for pid in pids:
        own = pl.col("pid") == pid
        out.append(TraceTables(kernels=tables.kernels.filter(_kernel_pid(tables) == pid),
                               launches=tables.launches.filter(own), ops=tables.ops.filter(own), meta=tables.meta))
    return out
