"""The per-file work of importing several traces (one per rank): read and attribute each file on its own, in
parallel processes on this machine or as tasks on a Ray cluster; `combine_ranks` then joins them in the caller.

`read_rank` is the one function every mode runs, so serial, local-parallel and Ray imports give the same tables.
Local: this process reads files from the front of the list while helper processes, started from the fork server,
take them from the back (a shared counter pair), so a helper that starts late simply takes fewer; a helper sends
its tables back as Arrow IPC files in a private spool folder. Helpers are plain processes, always stopped in a
finally block, and the spool is removed there: an interrupted import leaves nothing behind. How many processes:
bounded by the cores, the files and the memory their decoding needs (estimated from file sizes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.allocator import trim_native_heap
from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.attribution.attribution_sources import Sources, infer_attribution
from kernelscope.analyze.integrity import audit_trace
from kernelscope.analyze.ranks.host_calls import host_calls
from kernelscope.analyze.ranks.processes import processes, split_processes
from kernelscope.analyze.ranks.ranks import combine_calls, combine_ranks
from kernelscope.contracts.trace import TraceMeta, TraceTables
from kernelscope.errors import UserError
from kernelscope.load.sources import read_trace
from kernelscope.progress import SILENT, Steps
from kernelscope.workers import (
    add_cleanup,
    forkserver_context,
    remove_cleanup,
    signals_held,
    take_index,
    usable_cores,
)

MEMORY_PER_TEXT_BYTE = 4  # peak memory of reading and attributing a trace, per byte of its (uncompressed) text
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class RankTables:
    """One file read and attributed: its kernels and ops, where its attribution came from, what it says of itself,
    and its runtime calls that launched nothing (analyze/ranks/host_calls)."""

    kernels: pl.DataFrame
    ops: pl.DataFrame
    sources: Sources
    meta: TraceMeta
    calls: pl.DataFrame | None = None


def read_rank(path: str, workers: int | None = None, steps: Steps = SILENT) -> RankTables:
    """Read one trace file and attribute its kernels (top-level, so that helper processes and Ray tasks can run it
    by name). workers: processes the reader may use for this one file; steps: the display of a file read in the
    command's own process (its chunks as they are decoded, then attribution)."""
    size = Path(path).stat().st_size if Path(path).is_file() else 0
    with steps.step(f"Reading {Path(path).name} ({size / 1e6:,.1f} MB)", counted=True) as advance:
        tables = read_trace(Path(path), workers=workers, progress=advance.fraction)
    trim_native_heap()  # what decoding left in glibc's heaps (the reader threads' buffers, NumPy's arrays)
    with steps.step("Auditing the trace and attributing its kernels (phase, step, module, op)"):
        tables.meta.audit = audit_trace(tables)  # from the file's own tables, before attribution changes them
        meta = tables.meta
        if len(processes(tables)) > 1:
            return _read_processes(tables)  # an Nsight Systems export or rocprofv3 output of several processes
        calls = host_calls(tables.launches, tables.kernels)
        kernels, ops = attribute(tables)
        del tables  # the trace's own tables (launches, kernels before sorting) go before the next step's peak
        trim_native_heap()  # attribution's NumPy arrays
        kernels, sources = infer_attribution(kernels, ops)
    return RankTables(kernels=kernels, ops=ops, sources=sources, meta=meta, calls=calls)


def _read_processes(tables: TraceTables) -> RankTables:
    """Each process of the recording attributed on its own, as ranks 0, 1, … (by process id) of one table."""
    parts, sources, calls = [], [], []
    for own in split_processes(tables):
        calls.append(host_calls(own.launches, own.kernels))
        kernels, ops = attribute(own)
        kernels, found = infer_attribution(kernels, ops)
        parts.append((kernels, ops))
        sources.append(found)
    kernels, ops = combine_ranks(parts)
    return RankTables(kernels=kernels, ops=ops, sources=sources[0], meta=tables.meta, calls=combine_calls(calls))


def read_rank_or_error(path: str) -> RankTables | UserError:
    """read_rank for a Ray task: a file's error comes back as a value, to be raised as the same one line here."""
    try:
        return read_rank(path)
    except UserError as exc:
        return exc


def default_jobs(files: list[Path]) -> int:
    """Processes for reading `files`: one per core, at most one per file, and no more than the available memory
    holds at the largest file's estimated peak."""
    cores = usable_cores()
    peak = max((estimated_memory(f) for f in files), default=0)
    available = _available_memory()
    by_memory = max(1, available // peak) if peak and available else len(files)
    return max(1, min(cores, len(files), by_memory))


def estimated_memory(path: Path) -> int:
    """Peak memory of reading one file, from its size (a gzip file by its uncompressed size, from its trailer)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if f.read(2) == _GZIP_MAGIC and size >= 18:
                f.seek(-4, os.SEEK_END)
                # ISIZE is the size modulo 2**32: never below the compressed size for trace text.
                size = max(int.from_bytes(f.read(4), "little"), size)
    except OSError:
        return 0
    return MEMORY_PER_TEXT_BYTE * size


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def read_ranks(files: list[Path], jobs: int | None = None, steps: Steps = SILENT) -> list[RankTables]:
    """Every file read and attributed, in order, by `jobs` processes (default: default_jobs). steps: the display
    of the files read in this process (helper processes show nothing: the command shows the files' count)."""
    if jobs is not None and max(1, min(jobs, len(files))) == 1:
        return [read_rank(str(f), workers=1, steps=steps) for f in files]  # --jobs 1: no chunk helpers either
    jobs = default_jobs(files) if jobs is None else min(jobs, len(files))
    if jobs == 1 or not _main_module_importable():
        # One file (or room for one at a time), or no helper processes: each file's reader may still split it.
        return [read_rank(str(f), steps=steps) for f in files]
    with steps.step(f"Reading and attributing {len(files)} files in {jobs} processes"):
        return _read_in_processes([str(f) for f in files], jobs)


def _main_module_importable() -> bool:
    from kernelscope.report.figure_jobs import main_module_importable

    return main_module_importable()


def _read_in_processes(files: list[str], jobs: int) -> list[RankTables]:
    ctx = forkserver_context([__name__])
    bounds = ctx.Array("q", [0, len(files)])
    results: dict[int, RankTables] = {}
    errors: dict[int, BaseException] = {}
    helpers: list[Any] = []
    receivers: list[Connection] = []
    spool: str | None = None

    def stop_helpers_and_remove_spool() -> None:  # idempotent: in the finally, and in cli's cleanups
        for helper in helpers:
            if helper.pid is not None:
                helper.terminate()  # a no-op once it has finished
                helper.join()
        for receiving in receivers:
            receiving.close()
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)

    try:
        with signals_held():  # a signal waits until the helpers and the spool are known to the finally below
            add_cleanup(stop_helpers_and_remove_spool)
            spool = tempfile.mkdtemp(prefix="kernelscope-ranks-")
            for _ in range(jobs - 1):
                receiving, sending = ctx.Pipe(duplex=False)
                helper = ctx.Process(target=_helper, args=(files, bounds, spool, sending), daemon=True)
                with contextlib.suppress(OSError):
                    helper.start()
                sending.close()
                helpers.append(helper)
                receivers.append(receiving)
        while (index := _take(bounds, from_back=False)) is not None:
            try:
                results[index] = read_rank(files[index], workers=1)
            except Exception as exc:  # the helpers' files may hold an earlier error: raised in file order below
                errors[index] = exc
        open_receivers = list(receivers)
        while open_receivers:
            for receiving in wait(open_receivers):
                try:
                    index, payload = receiving.recv()
                except (EOFError, OSError):  # the helper finished, or died: what it left is read below
                    open_receivers.remove(receiving)
                    continue
                if isinstance(payload, BaseException):
                    errors[index] = payload
                else:
                    results[index] = _from_spool(payload)
    finally:
        # A signal landing in the cleanup must not cut it short (a helper would go on writing into the spool);
        # one landing before the hold starts leaves it to cli's cleanups (workers.run_cleanups).
        with signals_held():
            stop_helpers_and_remove_spool()
            remove_cleanup(stop_helpers_and_remove_spool)
    for index in range(len(files)):  # a helper that could not start or died: read what it left here
        if index not in results and index not in errors:
            try:
                results[index] = read_rank(files[index], workers=1)
            except Exception as exc:
                errors[index] = exc
    if errors:
        raise errors[min(errors)]
    return [results[i] for i in range(len(files))]


_take = take_index  # the shared counter pair (kernelscope.workers)


def _helper(files: list[str], bounds: Any, spool: str, results: Connection) -> None:
    """In a helper process: take files from the back until none is left; send (index, spooled tables) or
    (index, the error) for each."""
    while (index := _take(bounds, from_back=True)) is not None:
        try:
            results.send((index, _to_spool(read_rank(files[index], workers=1), spool, index)))
        except UserError as exc:
            results.send((index, exc))
        except Exception as exc:  # sent as text: an exception of a library may not survive pickling
            results.send((index, RuntimeError(f"{type(exc).__name__}: {exc}")))
    results.close()


def _to_spool(tables: RankTables, spool: str, index: int) -> dict[str, Any]:
    paths = {}
    for name in ("kernels", "ops", "calls"):
        if getattr(tables, name) is None:
            continue
        paths[name] = os.path.join(spool, f"{index}-{name}.arrow")
        getattr(tables, name).write_ipc(paths[name], compression="uncompressed")
    return {**paths, "sources": tables.sources, "meta": tables.meta}


def _from_spool(payload: dict[str, Any]) -> RankTables:
    # Files still mapped when the spool is removed stay readable until unmapped (as in load/kineto/chunks.py).
    return RankTables(kernels=pl.read_ipc(payload["kernels"]), ops=pl.read_ipc(payload["ops"]),
                      sources=payload["sources"], meta=payload["meta"],
                      calls=pl.read_ipc(payload["calls"]) if "calls" in payload else None)


def read_ranks_on_ray(files: list[Path], address: str) -> list[RankTables]:
    """Every file read and attributed as a task on a Ray cluster (`ray://host:port`, or `local`: a Ray instance
    started on this machine). The files must be readable at the same paths where the tasks run."""
    try:
        import ray
    except ImportError:
        raise UserError("import --cluster: Ray is not installed (pip install 'kernelscope[ray]')") from None
    started = not ray.is_initialized()
    if started:
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # connection refused, bad address: Ray raises several types
            raise UserError(f"import --cluster {address}: cannot start or reach Ray ({_one_line(exc)})") from None
    try:
        task = ray.remote(read_rank_or_error)
        refs = [task.remote(str(f.resolve())) for f in files]
        results = []
        for ref in refs:
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise UserError(f"import --cluster: a task failed ({_one_line(exc)})") from None
            if isinstance(result, UserError):
                raise result
            results.append(result)
        return results
    finally:
        if started:
            ray.shutdown()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__

