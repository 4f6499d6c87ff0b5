"""Checks every loader makes before reading an input file, so each names the same problems the same way."""

from __future__ import annotations

from pathlib import Path

from kernelscope.errors import UserError


def check_input_file(path: Path, expected: str) -> None:
    """Raise a one-line UserError when `path` is missing, a directory or empty; `expected` names what it should
    be (e.g. "a Kineto trace file (.json or .json.gz)")."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected {expected}")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: file is empty")
