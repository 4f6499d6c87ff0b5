"""kernelscope's caches on this machine (compiled report templates, the query's table columns): where they live and
whether a folder of them can be trusted. Nothing in them is ever read from or written into a run directory."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_root() -> Path:
    """$KERNELSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kernelscope, else ~/.cache/kernelscope."""
    if os.environ.get("KERNELSCOPE_CACHE_DIR"):
        return Path(os.environ["KERNELSCOPE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kernelscope"


def private_folder(folder: Path) -> Path | None:
    """`folder`, made if missing (mode 0700), when caching is on and only this user can have written there: a
    cache is read back and (for templates) executed, so a folder someone else could fill is not used. None
    otherwise."""
    if os.environ.get("KERNELSCOPE_NO_CACHE"):
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid != os.getuid():
        return None
    return folder
