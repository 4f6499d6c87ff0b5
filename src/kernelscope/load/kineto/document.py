"""The trace document: its text (memory-mapped; gzip input streamed into an anonymous memory file first), where its event
array lies, and the fields around the array.

The event array is found by text where the layout allows (`"traceEvents": [` then a tail of plain fields), which
costs nothing; the range is checked by decoding (a wrong range never decodes, see chunks.py), and when the text
cannot be trusted the exact parser finds the array instead (one more scan of the file)."""

from __future__ import annotations

import contextlib
import gc
import gzip
import mmap
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from kernelscope.errors import UserError
from kernelscope.load.budget import MEMORY_BUDGET_ENV, memory_budget
from kernelscope.load.input_checks import check_input_file
from kernelscope.load.kineto.schema_errors import describe

_KEY = b'"traceEvents"'


@dataclass(frozen=True)
class EventArray:
    """The byte range of the event array (brackets included) and the document's other fields."""

    fields: dict[str, Any]
    offset: int
    length: int
    exact: bool  # found by the exact parser (no need to check it again)
    unclosed: bool = False  # a bare array whose closing bracket is missing (the Chrome format allows it)

    @property
    def end(self) -> int:
        return self.offset + self.length


DEFAULT_MAX_TRACE_BYTES = 32 << 30
MAX_TRACE_ENV = "KERNELSCOPE_MAX_TRACE_BYTES"
# A trace compresses 10-30x (JSON of distinct numbers); 1000x is a file of repeated bytes, not a trace. Checked
# once this much is decompressed, so that a small real file never meets it.
MAX_GZIP_RATIO = 200
RATIO_CHECKED_FROM = 64 << 20


def max_trace_bytes() -> int:
    """The cap on a gzip trace's decompressed size: 32 GiB, or $KERNELSCOPE_MAX_TRACE_BYTES."""
    text = os.environ.get(MAX_TRACE_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_TRACE_BYTES
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{MAX_TRACE_ENV}: '{text}' is not a number of bytes") from None
    if value <= 0:
        raise UserError(f"{MAX_TRACE_ENV}: '{text}' must be positive")
    return value


def _cap() -> tuple[int, str]:
    """What a gzip trace may decompress to, and how to raise it: the size cap, or the memory budget where that
    is smaller (the decompressed text is held in memory)."""
    size, budget = max_trace_bytes(), memory_budget()
    if budget < size:
        return budget, f"the memory budget; set {MEMORY_BUDGET_ENV} to allow more"
    return size, f"the limit; set {MAX_TRACE_ENV} to read larger traces"


@contextmanager
def open_trace_text(path: Path) -> Iterator[tuple[Path, mmap.mmap]]:
    """The trace's JSON text as a memory map (no copy into the heap) and the plain file behind it: the file
    itself, or, for gzip input, the text decompressed by streaming into an anonymous memory file (Linux memfd:
    nothing on disk, gone when the process ends however it ends; a temporary file elsewhere). Decompression
    stops at once when the first bytes are not JSON, and at the size cap (a gzip bomb)."""
    check_input_file(path, "a Kineto trace file (.json or .json.gz)")
    with path.open("rb") as f:
        compressed = f.read(2) == b"\x1f\x8b"
    if not compressed:
        with mapped(path) as data:
            yield path, data
        return
    with _plain_copy(path) as plain, mapped(plain) as data:
        yield plain, data


@contextmanager
def _plain_copy(path: Path) -> Iterator[Path]:
    cap, raise_it = _cap()
    fd, name, cleanup = _anonymous_file()
    try:
        with os.fdopen(os.dup(fd), "wb") as out:
            written = _decompress(path, out, cap, raise_it)
        if written == 0:
            raise UserError(f"{path}: file is empty after decompression")
        yield Path(name)
    finally:
        os.close(fd)
        cleanup()


def _anonymous_file() -> tuple[int, str, Any]:
    """(fd, a path other processes of ours can open it by, cleanup)."""
    if hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir():
        fd = os.memfd_create("kernelscope-trace", 0)
        return fd, f"/proc/{os.getpid()}/fd/{fd}", lambda: None
    tmp = tempfile.mkdtemp(prefix="kernelscope-trace-")
    name = os.path.join(tmp, "trace.json")
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    return fd, name, lambda: shutil.rmtree(tmp, ignore_errors=True)


def _decompress(path: Path, out: Any, cap: int, raise_it: str) -> int:
    """Stream the gzip file into `out`; stop at `cap` bytes, and at a compression ratio no trace has."""
    written, checked = 0, False
    try:
        with path.open("rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as fin:
            while block := fin.read(1 << 22):
                if not checked:
                    checked = _looks_like_json(path, block)
                written += len(block)
                if written > cap:
                    raise UserError(f"{path}: decompresses to more than {cap:,} bytes ({raise_it})")
                if written >= RATIO_CHECKED_FROM and written > MAX_GZIP_RATIO * max(raw.tell(), 1):
                    raise UserError(f"{path}: decompresses to more than {MAX_GZIP_RATIO} times its size, which no "
                                    f"trace does (a decompression bomb?)")
                out.write(block)
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:  # the memory file could not grow, or a read failed
            raise UserError(f"{path}: cannot decompress ({exc.strerror or exc})") from None
        raise UserError(f"{path}: corrupt or truncated gzip data ({exc})") from None
    return written


def _looks_like_json(path: Path, block: bytes) -> bool:
    """True once the decompressed text has shown its first character, which must open a JSON object or array;
    False while the block is all whitespace (the next block decides)."""
    head = block[3:] if block.startswith(b"\xef\xbb\xbf") else block
    first = head.lstrip()[:1]
    if not first:
        return False
    if first not in (b"{", b"["):
        raise UserError(f"{path}: the decompressed data is not JSON (a Kineto trace starts with '{{' or '[')")
    return True


@contextmanager
def mapped(path: Path) -> Iterator[mmap.mmap]:
    with path.open("rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield data
        finally:
            _close(data)


def _close(data: mmap.mmap) -> None:
    """Close the map. A view of it that is still alive (held by the frames of an error being raised) would make
    close() raise BufferError and hide that error: collect such frames first, and if a view still lives, the map
    is unmapped when the last view goes."""
    try:
        data.close()
    except BufferError:
        gc.collect()
        with contextlib.suppress(BufferError):
            data.close()


class _Document(msgspec.Struct):
    """The trace object with its event array left as raw text (the exact locator)."""

    traceEvents: msgspec.Raw
    schemaVersion: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    trace_id: Any = None
    distributedInfo: Any = None


def locate_events(path: Path, data: mmap.mmap, exact: bool = False) -> EventArray:
    """Where the event array is. The text search (default) may be wrong for unusual layouts: callers check it by
    decoding and ask again with exact=True when it fails."""
    first = data[_bom(data):4096].lstrip()[:1]
    if first == b"[":
        return _bare_array(data)
    if first != b"{":
        raise UserError(f"{path}: not JSON (a Kineto trace starts with '{{' or '[')")
    if not exact:
        found = _locate_by_text(data)
        if found is not None:
            return found
    return _locate_exactly(path, data)


def _bom(data: mmap.mmap) -> int:
    """Bytes of a UTF-8 byte order mark at the start (some Windows tools write one)."""
    return 3 if data[:3] == b"\xef\xbb\xbf" else 0


def _bare_array(data: mmap.mmap) -> EventArray:
    """The Chrome trace's array form: `[ {…}, … ]`, the closing bracket optional (and a trailing comma with it)."""
    start = data.find(b"[")
    close = data.rfind(b"]")
    if close > start and not data[close + 1:].strip():
        return EventArray({}, start, close + 1 - start, exact=True)
    last = data.rfind(b"}")
    return EventArray({}, start, max(last + 1 - start, 1), exact=True, unclosed=True)


def _locate_by_text(data: mmap.mmap) -> EventArray | None:
    """Kineto's layout: a few fields, then "traceEvents": [...], then fields whose values hold no `]` (or none).
    The fields before and after the array are decoded on their own; None if they do not decode."""
    key = data.find(_KEY)
    if key < 0:
        return None
    start = data.find(b"[", key)
    if start < 0 or data[key + len(_KEY): start].strip() != b":":
        return None
    tail_from = max(start, len(data) - (1 << 16))
    end = data.rfind(b"]", tail_from)
    if end <= start:
        return None
    tail = data[end + 1:].strip()
    if not (tail == b"}" or tail.startswith(b",")):
        return None
    try:
        head = msgspec.json.decode(data[_bom(data):key].rstrip().rstrip(b",") + b"}")
        rest = msgspec.json.decode(b"{" + tail[1:]) if tail.startswith(b",") else {}
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(head, dict) or not isinstance(rest, dict):
        return None
    return EventArray({**head, **rest}, start, end + 1 - start, exact=False)


def _locate_exactly(path: Path, data: mmap.mmap) -> EventArray:
    """Slow but exact: the decoder finds the array (it scans the whole text once)."""
    with memoryview(data) as whole, whole[_bom(data):] as text:
        try:
            document = msgspec.json.decode(text, type=_Document)
        except msgspec.ValidationError as exc:
            raise UserError(f"{path}: not a Kineto trace: {describe(str(exc))}") from None
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except msgspec.DecodeError as exc:
            if "utf-8" in str(exc).lower():
                raise UserError(f"{path}: not UTF-8 text ({exc})") from None
            raise UserError(f"{path}: invalid or truncated JSON: {exc}") from None
        except RecursionError:
            raise UserError(f"{path}: not a Kineto trace: JSON nested too deeply") from None
        # Views into the map must all be released before returning or raising, or the map cannot close.
        fields = msgspec.structs.asdict(document)
        raw = fields.pop("traceEvents")
        del document
        with memoryview(raw) as view:
            is_list = view[:1].tobytes() == b"["
            length = len(view)
            offset = np.frombuffer(view, dtype=np.uint8).ctypes.data - np.frombuffer(whole, dtype=np.uint8).ctypes.data
        del raw
    if not is_list:
        raise UserError(f"{path}: not a Kineto trace: 'traceEvents' is not a list")
    return EventArray(fields, int(offset), int(length), exact=True)
