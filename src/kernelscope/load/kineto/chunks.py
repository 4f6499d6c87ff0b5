"""Split the event array between top-level events and decode the pieces, in bounded memory; big traces by several
threads (the native fast path) or helper processes (msgspec alone).

Split points are `}` `,` `{` with any whitespace between, found by one regex search per chunk (any separator
style: compact, `}, {`, newlines, indentation). A search cannot know whether a match sits between top-level
events, but the decoder can: a chunk ends in `}` + `]` and starts with `[` + `{`, so a cut inside a string leaves
that string unterminated and a cut inside a nested object or list leaves brackets unclosed, and the chunk does
not decode. Every chunk decoding therefore proves every cut was between top-level events; any failure makes the
caller decode the exactly located array in one piece instead.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.load.kineto.document import mapped
from kernelscope.load.kineto.events import empty_columns
from kernelscope.load.kineto.marks import scan_marks
from kernelscope.load.kineto.native_tables import available as native_available
from kernelscope.load.kineto.native_tables import decode_native
from kernelscope.load.kineto.native_tables import release as release_native
from kernelscope.workers import forkserver_context, take_index

CHUNK_BYTES = 16 << 20
HELPER_START_S = 0.5  # the longest the parent waits for a helper to start before decoding alone
PARALLEL_BYTES = 64 << 20
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")


@dataclass(frozen=True)
class Chunk:
    start: int
    stop: int
    opens: bool  # holds the array's opening bracket
    closes: bool  # holds its closing bracket


def chunk_ranges(data: mmap.mmap, offset: int, length: int, chunk_bytes: int = CHUNK_BYTES,
                 closed: bool = True) -> list[Chunk]:
    """Chunks of about chunk_bytes that split the array [offset, offset + length) between events; `closed`:
    the range ends with the array's closing bracket."""
    end = offset + length
    chunks, start = [], offset
    target = offset + chunk_bytes
    while target < end - chunk_bytes // 4:
        match = _SEPARATOR.search(data, target, end)
        if match is None:
            break
        cut = match.start()
        chunks.append(Chunk(start, cut + 1, start == offset, False))
        start = match.end() - 1  # the next event's `{`
        target = start + chunk_bytes
    chunks.append(Chunk(start, end, start == offset, closed))
    return chunks


def chunk_text(data: mmap.mmap, chunk: Chunk) -> bytearray:
    """One chunk of events as a JSON array (a single copy out of the map; the map's pages of it are then let
    go, so that the file does not stay resident behind the decoded tables)."""
    text = bytearray() if chunk.opens else bytearray(b"[")
    with memoryview(data) as whole, whole[chunk.start:chunk.stop] as piece:
        text += piece
    if not chunk.closes:
        text += b"]"
    release(data, chunk.start, chunk.stop)
    return text


def release(data: mmap.mmap, start: int = 0, stop: int | None = None) -> None:
    """Drop the process's resident pages of data[start:stop] (they stay in the page cache, or in the memory
    file of a decompressed trace; reading them again is a cheap fault). Whole pages inside the range only."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return
    page = mmap.PAGESIZE
    first = -(-start // page) * page
    last = (len(data) if stop is None else stop) // page * page
    if last > first:
        with contextlib.suppress(OSError, ValueError):
            data.madvise(advice, first, last - first)


Decode = Callable[[bytes | bytearray, bool], dict[str, Any]]


def decode_chunks(decode: Decode, plain: Path, data: mmap.mmap, chunks: list[Chunk], workers: int,
                  final: bool = False, progress: Progress | None = None) -> list[dict]:
    """decode(text, final) → that chunk's tables, for every chunk in order; `final`: the one chunk of an exactly
    located array (a decoding error is then the file's, not a split point's). Each chunk goes to the native fast
    path first (decode only where it declines). With workers > 1 and the fast path built, a pool of threads
    shares the chunks. Without it, the parent takes chunks from the front and helper processes from the back
    until they meet (a shared counter pair), so a helper that starts late simply takes fewer. Helpers map the file themselves: no chunk text crosses
    processes, only finished tables come back (as Arrow IPC files the parent maps)."""
    counted = _counted(progress, len(chunks))
    try:
        return _decode_all(decode, plain, data, chunks, workers, final, counted)
    finally:
        release_native()
        if progress is not None:
            progress(len(chunks), len(chunks))


Progress = Callable[[int, int], None]  # (chunks decoded, chunks): a reader's progress, for the command's display


def _counted(progress: Progress | None, total: int) -> Callable[[], None]:
    """A callable to call once per decoded chunk (from any thread) that reports the count so far."""
    if progress is None:
        return lambda: None
    lock, done = threading.Lock(), [0]
    progress(0, total)

    def one() -> None:
        with lock:
            done[0] += 1
            progress(done[0], total)
    return one


def _decode_all(decode: Decode, plain: Path, data: mmap.mmap, chunks: list[Chunk], workers: int,
                final: bool, counted: Callable[[], None]) -> list[dict]:
    if workers <= 1 or len(chunks) == 1:
        return [_after(_decoded(decode, data, c, final and len(chunks) == 1), counted) for c in chunks]
    if native_available():
        # The native fast path lets go of the GIL while it scans: threads share the work without a process to
        # start or tables to send back (helper processes made a 340 MB trace slower than one thread).
        with ThreadPoolExecutor(workers) as pool:
            # (Each thread's native buffers go with the thread.)
            return list(pool.map(lambda chunk: _after(_decoded(decode, data, chunk, False), counted), chunks))
    ctx = forkserver_context([__name__])
    bounds = ctx.Array("q", [0, len(chunks)])
    results: dict[int, dict[str, Any]] = {}
    spool = tempfile.mkdtemp(prefix="kernelscope-chunks-")
    try:
        with ProcessPoolExecutor(workers - 1, mp_context=ctx, initializer=_set_bounds, initargs=(bounds,)) as pool:
            futures: list = []
            # Submitting starts the fork server (hundreds of ms): do it off the main thread.
            submitter = threading.Thread(target=lambda: futures.extend(
                pool.submit(_helper_chunks, decode, str(plain), chunks, spool) for _ in range(workers - 1)))
            submitter.start()
            # Decoding holds the GIL for long stretches, and the executor's threads need it to hand the task
            # over: let the helper start first (it takes its first chunk), or give up waiting after a moment.
            started = time.monotonic()
            while bounds[1] == len(chunks) and time.monotonic() - started < HELPER_START_S:
                time.sleep(0.005)
            while (index := _take(bounds, from_back=False)) is not None:
                results[index] = _after(decode(chunk_text(data, chunks[index]), False), counted)
            submitter.join()
            for future in futures:
                with contextlib.suppress(BrokenProcessPool, OSError, EOFError):
                    for index, files in future.result().items():
                        results[index] = {k: _from_spool(v) if isinstance(v, tuple) else v for k, v in files.items()}
        # A helper that could not start or died (e.g. the main module cannot be re-imported, as for code
        # run from stdin) leaves chunks undone: finish them here.
        for index in range(len(chunks)):
            if index not in results:
                results[index] = decode(chunk_text(data, chunks[index]), False)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return [results[i] for i in range(len(chunks))]


_BOUNDS: Any = None


def _after(decoded: dict[str, Any], counted: Callable[[], None]) -> dict[str, Any]:
    counted()
    return decoded


def _decoded(decode: Decode, data: mmap.mmap, chunk: Chunk, final: bool) -> dict[str, Any]:
    """One chunk's tables: by the native fast path straight from the map where it reads the chunk, else by
    `decode` (msgspec) from a copy."""
    # The views are released as the block ends, also when decoding raises (out of memory on a loaded machine):
    # a view kept alive by the error's traceback would keep the map from closing.
    with memoryview(data) as whole, whole[chunk.start:chunk.stop] as piece:
        fast = decode_native(piece, chunk.opens, chunk.closes)
        if fast is not None:  # the flows and window marks the native scan skips (marks.py)
            fast["marks"] = scan_marks(piece)
    if fast is None:
        return decode(chunk_text(data, chunk), final)
    release(data, chunk.start, chunk.stop)
    return fast


def _set_bounds(bounds: Any) -> None:
    global _BOUNDS
    _BOUNDS = bounds


_take = take_index  # the shared counter pair (kernelscope.workers)


def _helper_chunks(decode: Decode, plain: str, chunks: list[Chunk], spool: str) -> dict[int, dict[str, Any]]:
    """A helper's loop, as one task (the executor's feeder thread gets little time while the parent decodes,
    holding the GIL, so a helper must not wait for further work items)."""
    done: dict[int, dict[str, Any]] = {}
    with mapped(Path(plain)) as data:
        while (index := _take(_BOUNDS, from_back=True)) is not None:
            tables = decode(chunk_text(data, chunks[index]), False)
            for name, value in list(tables.items()):
                if isinstance(value, pl.DataFrame):
                    file = os.path.join(spool, f"{index}-{name}.arrow")
                    # Columns without any value travel as their names and types only (the file would hold them
                    # as buffers of nulls, and so would the parent's memory).
                    empty = empty_columns(value)
                    value.drop(list(empty)).write_ipc(file, compression="uncompressed")
                    tables[name] = (file, empty, value.columns)
            done[index] = tables
    return done


def _from_spool(spooled: tuple[str, dict[str, Any], list[str]]) -> pl.DataFrame:
    file, empty, columns = spooled
    table = pl.read_ipc(file)
    if empty:
        table = table.with_columns(pl.lit(None, dtype=dtype).alias(name) for name, dtype in empty.items())
    return table.select(columns)
