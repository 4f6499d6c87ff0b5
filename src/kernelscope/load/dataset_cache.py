"""What a dataset learned about its runs' files, kept between calls: each local table file's columns, keyed by the
file's path and checked against its identity (device, inode, size, modification and change times), so a file
that changed in any way is read again and a file that did not is not opened before the query runs.

The cache never writes next to the runs (they are input, possibly not ours): it lives in a private folder
(0700, ours) under $KERNELSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kernelscope, else ~/.cache/kernelscope, one small
JSON file per set of run locations. It is a convenience: a folder that cannot be made private, a file that
cannot be read or written, or one in an unexpected shape is simply not used. KERNELSCOPE_NO_CACHE=1 turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from kernelscope.load.cache_folders import cache_root, private_folder

VERSION = 1
KEEP = 64  # cache files kept (the most recently used); older ones are removed


def cache_folder() -> Path | None:
    """The private folder of dataset caches, or None when caching is off or the folder is not ours alone."""
    return private_folder(cache_root() / f"datasets-v{VERSION}")


def identity(path: str) -> list[int] | None:
    """What tells a file's versions apart: a changed file has another identity (None: not a local file)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


class ColumnCache:
    """Table files' top-level column names and types, by path, valid while the file's identity is unchanged.
    Stored as a list of distinct column lists and, per file, its identity and the number of its column list:
    a thousand runs hold a handful of distinct ones."""

    def __init__(self, key: str) -> None:
        folder = cache_folder()
        self._path = folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json") if folder else None
        self._schemas: list[list[tuple[str, str]] | None] = []
        self._files: dict[str, tuple[list[int], int]] = {}
        self._read()
        self._changed = False

    def _read(self) -> None:
        if self._path is None:
            return
        try:
            data = json.loads(self._path.read_bytes())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return
        schemas, files = data.get("schemas"), data.get("files")
        if not isinstance(schemas, list) or not isinstance(files, dict):
            return
        self._schemas = [_columns(s) for s in schemas]
        self._files = {path: (entry[0], entry[1]) for path, entry in files.items()
                       if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)
                       and 0 <= entry[1] < len(self._schemas) and self._schemas[entry[1]] is not None}

    def get(self, path: str, ident: list[int] | None) -> list[tuple[str, str]] | None:
        """The cached columns of `path` if its identity is the one they were read at."""
        entry = self._files.get(path)
        if ident is None or entry is None or entry[0] != ident:
            return None
        return self._schemas[entry[1]]

    def put(self, path: str, ident: list[int] | None, columns: list[tuple[str, str]]) -> None:
        if ident is None:
            return
        columns = [(name, kind) for name, kind in columns]
        try:
            number = self._schemas.index(columns)
        except ValueError:
            number = len(self._schemas)
            self._schemas.append(columns)
        self._files[path] = (ident, number)
        self._changed = True

    def keep_only(self, paths: set[str]) -> None:
        """Forget files no longer part of the dataset."""
        gone = set(self._files) - paths
        for path in gone:
            del self._files[path]
        self._changed |= bool(gone)

    def save(self) -> None:
        """Write the cache if it changed (atomically: a concurrent reader sees the old file or the new one)."""
        if self._path is None or not self._changed:
            return
        used = sorted({number for _, number in self._files.values()})
        renumber = {old: new for new, old in enumerate(used)}
        data = {"version": VERSION, "schemas": [[list(c) for c in self._schemas[n] or []] for n in used],
                "files": {path: [ident, renumber[n]] for path, (ident, n) in self._files.items()}}
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(data, out, separators=(",", ":"))
                os.replace(tmp, self._path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            _prune(self._path.parent)


def _columns(value: object) -> list[tuple[str, str]] | None:
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
