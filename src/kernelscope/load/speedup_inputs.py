"""`kernelscope whatif RUN --speedup TARGET=FACTOR`: the text of one --speedup read and checked (docs/whatif.md)."""

from __future__ import annotations

import math
import re

from kernelscope.errors import UserError

# A factor beyond this is no longer a speed-up but the work removed (use it so: 1e6 takes a kernel away).
MAX_FACTOR = 1e9
_FACTOR = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*[x×]?\s*$", re.IGNORECASE)


def parse_speedup(text: str) -> tuple[str, float]:
    """'TARGET=FACTOR' → (target, factor): the target's time is divided by the factor (2: twice as fast, 0.5: twice
    as slow). The target is everything before the last '=' (kernel names may hold one)."""
    target, sep, value = text.rpartition("=")
    if not sep or not target.strip():
        raise UserError(f"--speedup {text!r}: give TARGET=FACTOR (a kernel, a module or a class: compute, "
                        "communication, wait, launch, host), e.g. --speedup compute=2")
    match = _FACTOR.match(value)
    if not match:
        raise UserError(f"--speedup {text!r}: the factor {value!r} is not a number (2 for twice as fast)")
    factor = float(match.group(1))
    if not math.isfinite(factor) or factor <= 0 or factor > MAX_FACTOR:
        raise UserError(f"--speedup {text!r}: the factor must be above 0 and at most {MAX_FACTOR:g} "
                        "(2: twice as fast, 0.5: twice as slow)")
    return target.strip(), factor
