"""File names built from data (phase names, device names, labels): one safe path component each."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")
MAX_LENGTH = 120


def safe_component(text: str, fallback: str = "x") -> str:
    """`text` as one path component: no separators, no `.`/`..`, no hidden-file dot, at most MAX_LENGTH
    characters. Text that had to change keeps a short hash of the original, so distinct inputs stay distinct."""
    cleaned = _UNSAFE.sub("-", text).strip("-.")[:MAX_LENGTH] or fallback
    if cleaned != text:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = f"{cleaned[: MAX_LENGTH - 9]}-{digest}"
    return cleaned
