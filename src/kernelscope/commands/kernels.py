"""`kernelscope kernels [NAME…]`: what the kernel catalog says about kernel names."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kernelscope import inert
from kernelscope.errors import UserError

if TYPE_CHECKING:
    from kernelscope.analyze.costs.catalog import KernelInfo

HELP = "name kernels: library, category, friendly name, description"
DESCRIPTION = ("Look kernel names up in the kernel catalog (any profiler's spelling: Kineto, Nsight, base or "
               "mangled). Names come from the arguments, or one per line on stdin when none are given.")

_COLUMNS = ("library", "category", "friendly name", "description")
_MAX_FRIENDLY = 60  # keep the table readable; --json has every character


def read_names(arguments: list[str], stdin_lines: Iterable[str] | None) -> list[str]:
    """Names from the arguments, else one per line of stdin (blank lines skipped)."""
    names = [name.strip() for name in arguments] if arguments else [line.strip() for line in stdin_lines or ()]
    names = [name for name in names if name]
    if not names:
        raise UserError("kernels: no kernel names given (pass them as arguments, or one per line on stdin)")
    return names


def as_json_lines(names: list[str]) -> str:
    from kernelscope.analyze.costs.catalog import classify

    # ASCII escapes: a name's control or direction characters reach the terminal as text, never as commands.
    return "\n".join(json.dumps({"name": name, **_fields(classify(name))}) for name in names)


def as_table(names: list[str]) -> str:
    from kernelscope.analyze.costs.catalog import classify

    rows = [_cells(classify(name)) for name in names]
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(_COLUMNS[:-1])]
    header = _line(_COLUMNS, widths)
    return "\n".join([header, "-" * len(header), *(_line(row, widths) for row in rows)])


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join([cell.ljust(width) for cell, width in zip(cells, widths, strict=False)] + [cells[-1]])


def _fields(info: KernelInfo) -> dict[str, str]:
    return {"library": info.library, "category": info.category, "friendly_name": info.friendly_name,
            "description": info.description}


def _cells(info: KernelInfo) -> tuple[str, str, str, str]:
    friendly = info.friendly_name
    if len(friendly) > _MAX_FRIENDLY:
        friendly = friendly[: _MAX_FRIENDLY - 1] + "…"
    return tuple(inert.terminal(cell) for cell in (info.library, info.category, friendly, info.description))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="kernel names (default: read stdin)")
    parser.add_argument("--json", action="store_true", help="one JSON object per name instead of a table")


def run(args: argparse.Namespace, steps) -> int:
    names = read_names(args.names, None if args.names or sys.stdin.isatty() else sys.stdin)
    print(as_json_lines(names) if args.json else as_table(names))
    return 0
