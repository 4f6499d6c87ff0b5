"""Which files each figure is written as: PNG (what the reports link and the HTML embeds) by default, SVG as well
on request (`--figure-formats png,svg`), or none at all (`--figure-formats none`: reports of tables and text, no
figure drawn and matplotlib never loaded). Kept apart from figures.py so that reading the option loads no
matplotlib."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path

from kernelscope.filenames import safe_component

FORMATS = ("png", "svg")
NONE = "none"  # the option's word for no figures: chosen is then ()
DEFAULT = ("png",)
chosen: ContextVar[tuple[str, ...]] = ContextVar("figure_formats", default=DEFAULT)


def parse(text: str) -> tuple[str, ...]:
    """'png,svg' → ("png", "svg"); PNG always comes first (the reports link it). 'none' alone → (): no figures."""
    asked = {part.strip().lower() for part in text.split(",") if part.strip()}
    if asked == {NONE}:
        return ()
    unknown = sorted(asked - set(FORMATS))
    if unknown or not asked:
        raise ValueError(f"figure formats are {' and '.join(FORMATS)} (comma-separated), or {NONE}; got '{text}'")
    return tuple(f for f in FORMATS if f in asked | {"png"})


def drawn() -> bool:
    """Whether this command draws figures at all (not with `--figure-formats none`)."""
    return bool(chosen.get())


def figure_files(directory: Path, stem: str) -> list[Path]:
    """The files a figure named `stem` is written as in `directory`, one per chosen format, PNG first. Stems carry
    phase names read from the input, so they are made safe to name a file."""
    stem = safe_component(stem, fallback="figure")
    return [directory / f"{stem}.{fmt}" for fmt in chosen.get()]
