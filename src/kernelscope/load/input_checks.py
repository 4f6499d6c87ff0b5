"""Checks every loader makes before reading an input file, so each names the same problems the same way."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernelscope.errors import UserError


def check_input_file(path: Path, expected: str) -> None:
    """Raise a one-line UserError when `path` is missing, unreadable, a directory, not a regular file (a FIFO or
    a device would block or never end) or empty; `expected` names what it should be (e.g. "a Kineto trace file
    (.json or .json.gz)")."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{path}: is a directory, expected {expected}")
    if not stat.S_ISREG(mode):
        raise UserError(f"{path}: not a regular file (a pipe, socket or device), expected {expected}")
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: permission denied")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: file is empty")
