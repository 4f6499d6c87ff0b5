"""Which files each figure is written as: PNG (what the reports link and the HTML embeds) by default, SVG as well
on request (`--figure-formats png,svg`). Kept apart from figures.py so that reading the option loads no
matplotlib."""

from __future__ import annotations

from contextvars import ContextVar

FORMATS = ("png", "svg")
DEFAULT = ("png",)
chosen: ContextVar[tuple[str, ...]] = ContextVar("figure_formats", default=DEFAULT)


def parse(text: str) -> tuple[str, ...]:
    """'png,svg' → ("png", "svg"); PNG always comes first (the reports link it)."""
    asked = {part.strip().lower() for part in text.split(",") if part.strip()}
    unknown = sorted(asked - set(FORMATS))
    if unknown or not asked:
        raise ValueError(f"figure formats are {' and '.join(FORMATS)}, got '{text}'")
    return tuple(f for f in FORMATS if f in asked | {"png"})
