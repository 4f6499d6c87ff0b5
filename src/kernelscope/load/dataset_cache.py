"""What a dataset learned about its local runs, kept between calls, so that a later query over the same folders
decodes no run.json and opens no table file before the query itself runs: each run's row of the `runs` view and
each table file's columns. Every entry is keyed by the identity of the files it was read from (device, inode,
size, modification and change times): a run whose run.json or summary.json changed, or whose kernels table came or
went, is read again, as is a table file that changed in any way. The tables' rows are never cached: the views
read the runs' Parquet files themselves, so no answer can come from an older version of a table.

The cache never writes next to the runs (they are input, possibly not ours): it lives in a private folder
(0700, ours) under $KERNELSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kernelscope, else ~/.cache/kernelscope, one file per
set of folders holding runs: a SHA-256 line, then the JSON it is the digest of. A file whose digest, version or
shape is not right, or that was written by code that makes rows differently (run_rows.rows_stamp), is not used
and is written anew; so is an entry of the wrong shape. A folder that cannot be made private, or a file that
cannot be read or written, only means that nothing is cached. KERNELSCOPE_NO_CACHE=1 turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from kernelscope.contracts.run_files import RUN_JSON
from kernelscope.load.cache_folders import cache_root, private_folder
from kernelscope.load.run_rows import is_row, rows_stamp

VERSION = 2
KEEP = 64  # cache files kept (the most recently used); older ones are removed
Columns = list[tuple[str, str]]
Identity = list[int]


def cache_folder() -> Path | None:
    """The private folder of dataset caches, or None when caching is off or the folder is not ours alone."""
    return private_folder(cache_root() / f"datasets-v{VERSION}")


def identity(path: str) -> Identity | None:
    """What tells a regular file's versions apart: a changed file has another identity (None: no such regular
    file, or not a local one)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


class DatasetCache:
    """Runs' rows by directory, valid while the run's key (the identities its row was made from) is unchanged;
    table files' top-level columns (name, DuckDB type) by path, valid while the file's identity is unchanged. The
    column lists are stored once each: a thousand runs hold a handful of distinct ones."""

    def __init__(self, key: str) -> None:
        folder = cache_folder()
        self._path = folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json") if folder else None
        self._stamp = rows_stamp() if folder else ""
        self._rows: dict[str, list[Any]] = {}  # directory → [key, row]
        self._schemas: list[Any] = []
        self._files: dict[str, list[Any]] = {}  # path → [identity, number of its column list]
        self._checked: dict[int, Columns | None] = {}  # column lists by number, as checked
        self._changed = False
        if self._path is not None and self._stamp:
            self._read()

    def _read(self) -> None:
        try:
            digest, _, payload = self._path.read_bytes().partition(b"\n")
        except OSError:
            return
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            self._changed = True  # torn or altered: written anew
            return
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):  # the digest fits, the text does not: not ours either
            data = None
        if (not isinstance(data, dict) or data.get("version") != VERSION or data.get("stamp") != self._stamp
                or not all(isinstance(data.get(k), t) for k, t in (("rows", dict), ("schemas", list),
                                                                   ("files", dict)))):
            self._changed = True
            return
        self._rows, self._schemas, self._files = data["rows"], data["schemas"], data["files"]

    def row(self, directory: str, key: list[Any]) -> tuple[Any, ...] | None:
        """The cached row of the run in `directory` if it was made from files of these identities."""
        entry = self._rows.get(directory)
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == key and is_row(entry[1])):
            return None
        return tuple(entry[1])

    def put_row(self, directory: str, key: list[Any], row: tuple[Any, ...]) -> None:
        if key[0] is None:  # run.json has no identity (not a local file): nothing to check the row by later
            return
        self._rows[directory] = [key, list(row)]
        self._changed = True

    def columns(self, path: str, ident: Identity | None) -> Columns | None:
        """The cached columns of the table file `path` if its identity is the one they were read at."""
        entry = self._files.get(path)
        if ident is None or not (isinstance(entry, list) and len(entry) == 2 and entry[0] == ident):
            return None
        if not _usable(entry, len(self._schemas)):
            return None
        if entry[1] not in self._checked:  # each distinct column list checked once
            self._checked[entry[1]] = _columns(self._schemas[entry[1]])
        return self._checked[entry[1]]

    def put_columns(self, path: str, ident: Identity | None, columns: Columns) -> None:
        if ident is None:
            return
        stored = [[name, kind] for name, kind in columns]
        try:
            number = self._schemas.index(stored)
        except ValueError:
            number = len(self._schemas)
            self._schemas.append(stored)
        self._files[path] = [ident, number]
        self._changed = True

    def forget_gone(self, directories: set[str], paths: set[str]) -> None:
        """Forget what is no longer there: of the runs of this call (`directories`), the table files not among
        `paths`; of the other runs the cache holds (a call may name some of a folder's runs), those without a
        run.json any more, and their files."""
        others = set(self._rows) - directories
        gone = {d for d in others if not os.path.lexists(os.path.join(d, RUN_JSON))}
        kept = (directories | others) - gone
        stale = [p for p in self._files if p not in paths and (p.rsplit("/", 1)[0] in directories
                                                                or p.rsplit("/", 1)[0] not in kept)]
        for directory in gone:
            del self._rows[directory]
        for path in stale:
            del self._files[path]
        self._changed |= bool(gone or stale)

    def save(self) -> None:
        """Write the cache if it changed (atomically: a concurrent reader sees the old file or the new one)."""
        if self._path is None or not self._stamp or not self._changed:
            return
        used = sorted({entry[1] for entry in self._files.values() if _usable(entry, len(self._schemas))})
        renumber = {old: new for new, old in enumerate(used)}
        data = {"version": VERSION, "stamp": self._stamp, "rows": self._rows,
                "schemas": [self._schemas[n] for n in used],
                "files": {path: [entry[0], renumber[entry[1]]] for path, entry in self._files.items()
                          if _usable(entry, len(self._schemas))}}
        payload = json.dumps(data, separators=(",", ":")).encode()
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
                os.replace(tmp, self._path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            _prune(self._path.parent)


def _usable(entry: object, schemas: int) -> bool:
    return (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)
            and not isinstance(entry[1], bool) and 0 <= entry[1] < schemas)


def _columns(value: object) -> Columns | None:
    """A stored column list, or None if it is not one."""
    if not isinstance(value, list):
        return None
    out = []
    for column in value:
        if not (isinstance(column, list) and len(column) == 2 and isinstance(column[0], str)
                and isinstance(column[1], str)):
            return None
        out.append((column[0], column[1]))
    return out


def _prune(folder: Path) -> None:
    """Remove all but the KEEP most recently written caches."""
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in files[KEEP:]:
        with contextlib.suppress(OSError):
            old.unlink()
