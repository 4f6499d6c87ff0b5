"""Compiled report templates kept between runs. Compiling the report's templates and sentences (Jinja: parse,
generate Python, compile) was about a fifth of the CPU time of a report, the same work on every run.

Jinja keys each compiled template by its name and checks its source; but compiled code also holds values Jinja
folded at compile time (filters applied to constants, the escaping of constant text), which come from our Python
code and word catalogs. So the cache lives in a folder named by a fingerprint of everything that can change the
compiled code: the report package's code, templates and words, and the Jinja and Python versions. Any change
makes a new folder; nothing stale is ever read.

The cache is a convenience: a folder that cannot be made private (0700, ours) or written is simply not used.
$KERNELSCOPE_CACHE_DIR names its root (default ~/.cache/kernelscope); KERNELSCOPE_NO_CACHE=1 turns it off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sys
from importlib import resources
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache

from kernelscope.load.cache_folders import cache_root, private_folder

# The parts of the report package whose contents can end up in compiled templates.
_FINGERPRINTED = ("*.py", "templates/*", "messages/*")


@functools.cache
def fingerprint() -> str:
    """The fingerprint of the installed report package."""
    return package_fingerprint(Path(str(resources.files("kernelscope.report"))))


def package_fingerprint(package: Path) -> str:
    """A digest of a report package's code, templates and words, and of the Jinja and Python versions."""
    digest = hashlib.sha256(f"{jinja2.__version__}\0{sys.version}\0".encode())
    for pattern in _FINGERPRINTED:
        for path in sorted(package.glob(pattern)):
            if path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


class _QuietCache(FileSystemBytecodeCache):
    """Jinja's file cache that never fails a report: a cache file that cannot be written is not written."""

    def dump_bytecode(self, bucket: Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


@functools.cache
def bytecode_cache(namespace: str) -> FileSystemBytecodeCache | None:
    """The compiled-template cache of one environment (`namespace`: page kind, language and anything else its
    filters depend on), or None when caching is off or its folder is not private to this user."""
    folder = private_folder(cache_root() / f"templates-{fingerprint()}" / namespace)
    if folder is None:
        return None
    return _QuietCache(str(folder))
