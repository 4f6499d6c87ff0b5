"""How much memory a command may fill with what it reads: a decompressed trace (held in an anonymous memory file)
and the SQL engine's working memory count against it, so that a small hostile file ends in one line instead of
the system's out-of-memory killer (docs/guarantees.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kernelscope.errors import UserError

MEMORY_BUDGET_ENV = "KERNELSCOPE_MEMORY_BUDGET"
# Share of the memory available when the command starts that it may fill by default: the rest is for the tables
# decoded from it, the Python process and the rest of the machine.
DEFAULT_SHARE = 0.6
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, name: str) -> int:
    """`8G`, `512M`, `1073741824` (bytes; K, M, G, T are powers of 1024) → bytes; a bad value is one line."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()]) if match else 0
    if value <= 0 or value >= 1 << 62:
        raise UserError(f"{name}: '{text}' is not a size (a number of bytes, or e.g. 8G, 512M)")
    return value


def memory_budget() -> int:
    """$KERNELSCOPE_MEMORY_BUDGET, or DEFAULT_SHARE of the memory available now (the smaller of the system's
    and the container's)."""
    text = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if text:
        return parse_size(text, MEMORY_BUDGET_ENV)
    return max(int(available_memory() * DEFAULT_SHARE), 1 << 28)


def available_memory() -> int:
    """Bytes of memory this process could still take: MemAvailable, narrowed by a cgroup limit if one is set."""
    free = _meminfo_available()
    limit = _cgroup_room()
    candidates = [v for v in (free, limit) if v is not None]
    return min(candidates) if candidates else 8 << 30  # nothing to read (not Linux): a modest default


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """cgroup v2: memory.max less memory.current of this process's group (None when unlimited or unknown)."""
    try:
        group = Path("/proc/self/cgroup").read_text().strip().split("\n")[0].split("::", 1)[1]
        base = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((base / "memory.current").read_text().strip()), 0)
    except (OSError, ValueError, IndexError):
        return None
