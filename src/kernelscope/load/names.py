"""Names read from inputs, bounded: a kernel or op name longer than MAX_NAME characters is cut and ends with a
short hash of the whole name, so distinct long names stay distinct and one huge name cannot cost gigabytes in the
catalog, the tables and the reports downstream."""

from __future__ import annotations

import hashlib

MAX_NAME = 4096
_MARK = "…#"


def bounded(name: str) -> str:
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[: MAX_NAME - len(_MARK) - len(digest)]}{_MARK}{digest}"


def bounded_all(names: list[str]) -> tuple[list[str], int]:
    """Every name bounded, and how many had to be cut."""
    cut = sum(1 for n in names if len(n) > MAX_NAME)
    if not cut:
        return names, 0
    return [bounded(n) for n in names], cut
