"""Argument types and groups several verbs share. Light on purpose: the parser is built before any heavy
library is imported, so `--help` and argument errors answer at once."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelscope.report.languages import LANGUAGES

MAX_COUNT = 1 << 31  # beyond any sensible count of rows, tokens or launches; larger ones overflow the tables


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value} is too large (at most {MAX_COUNT:,})")
    return value


def languages(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [lang for lang in chosen if lang not in LANGUAGES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"languages are {' and '.join(LANGUAGES)}, got '{text}'")
    return chosen


def figure_formats(text: str) -> tuple[str, ...]:
    from kernelscope.report import figure_formats as formats

    try:
        return formats.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_lang_arg(p: argparse.ArgumentParser) -> None:
    """The options of every command that writes a report: its languages and its figures' file formats."""
    p.add_argument("--lang", type=languages, default=LANGUAGES,
                   help=f"report languages, comma-separated: {', '.join(LANGUAGES)} (default: all)")
    p.add_argument("--figure-formats", type=figure_formats, default=None, metavar="png[,svg]|none",
                   help="files of each figure: png (default; what the reports show), png,svg, or none (reports "
                        "of tables and text, no figures drawn)")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="run directory to create (default: RUNS_DIR/<model>-<device>-<time>)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where new runs go (default ./runs)")
    p.add_argument("--no-report", action="store_true", help="write tables only, no report/")
    add_lang_arg(p)
