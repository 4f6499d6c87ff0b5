"""Prefill or decode for forward passes that no annotation names, from what the passes themselves show.

1. Shapes (traces recorded with record_shapes): the rows of each pass's first projection (the M of its first
   `aten::mm` / `aten::addmm` / `aten::linear`, batch × tokens). Decode feeds one token per sequence, so the passes
   with the fewest rows are decode and those with more are prefill (tokens per sequence: their rows over the
   decode rows) — said only when some pass has more rows than another.
2. Kernels, launch sizes and durations (no shapes): decode passes repeat one another, kernel for kernel; a pass
   that launches other kernels than the repeated ones, and either starts at least PREFILL_RATIO times their threads
   in its other kernels (element-wise work grows with the tokens) or spends that many times their GEMM time, is a
   prefill.
Either reading must look like generation: a prefill first, more decode passes than prefills, some decode passes
back to back. Anything else is left unknown, with the reason: every pass alike (a loop of one shape is no
generation), no pass repeating, a different pass that is not bigger, or passes that do not run as generation does.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from kernelscope import ranges
from kernelscope.contracts.run_info import StructureLevel

PREFILL_RATIO = 1.5


@dataclass(frozen=True)
class PassFacts:
    """What one forward pass shows: the rows of its first projection (None without shapes), a signature of its
    kernel sequence, and the time its matrix kernels took."""

    rows: int | None
    signature: int
    gemm_ns: int
    threads: int = 0  # threads launched by its kernels other than GEMMs and attention


@dataclass
class PassPhases:
    phases: list[str]
    tokens: list[int | None]
    evidence: str | None = None
    code: str | None = None  # what told them apart, or why unknown (report words: structure_<status>_phases_<code>)
    values: dict[str, int | float] = field(default_factory=dict)


def pass_phases(passes: list[PassFacts]) -> PassPhases:
    n = len(passes)
    unknown = [ranges.UNKNOWN] * n
    if n == 0:
        return PassPhases(unknown, [None] * n, code="no_passes")
    rows = [p.rows for p in passes]
    if all(r is not None and r > 0 for r in rows):
        fewest = min(r for r in rows if r is not None)
        if all(r == fewest for r in rows):
            return PassPhases(unknown, [None] * n, code="same_shapes", values={"passes": n, "rows": fewest})
        tokens = [r // fewest if r is not None and r % fewest == 0 else None for r in rows]
        phases = [ranges.DECODE if r == fewest else ranges.PREFILL for r in rows]
        if not _generation(phases):
            return PassPhases(unknown, [None] * n, code="not_generation", values={"passes": n})
        most = max(r for r in rows if r is not None)
        return PassPhases(phases, tokens, evidence=f"rows of each pass's first projection: {fewest} in decode passes "
                          f"(one token per sequence), {most} at most in prefill", code="rows",
                          values={"decode_rows": fewest, "prefill_rows": most})
    counts = Counter(p.signature for p in passes)
    common, seen = counts.most_common(1)[0]
    if seen < 2:
        return PassPhases(unknown, [None] * n, code="no_repeat", values={"passes": n})
    if seen == n:
        return PassPhases(unknown, [None] * n, code="all_alike", values={"passes": n})
    decode = [p for p in passes if p.signature == common]
    others = [p for p in passes if p.signature != common]
    gemm = _median([p.gemm_ns for p in decode])
    threads = _median([p.threads for p in decode])
    by_threads = threads > 0 and all(p.threads >= PREFILL_RATIO * threads for p in others)
    by_gemm = gemm > 0 and all(p.gemm_ns >= PREFILL_RATIO * gemm for p in others)
    if not (by_threads or by_gemm):
        return PassPhases(unknown, [None] * n, code="not_slower",
                          values={"ratio": round(min(p.gemm_ns for p in others) / gemm, 2) if gemm else 0.0})
    phases = [ranges.DECODE if p.signature == common else ranges.PREFILL for p in passes]
    if not _generation(phases):
        return PassPhases(unknown, [None] * n, code="not_generation", values={"passes": n})
    if by_threads:
        ratio = min(p.threads for p in others) / threads
        why, code = f"launch {ratio:.1f}× or more of their threads outside GEMMs", "threads"
    else:
        ratio = min(p.gemm_ns for p in others) / gemm
        why, code = f"spend {ratio:.1f}× or more of their GEMM time", "gemm_time"
    return PassPhases(phases, [1 if ph == ranges.DECODE else None for ph in phases],
                      evidence=f"{len(decode)} passes repeat one kernel sequence (decode); {len(others)} other(s) "
                      f"{why} (prefill)", code=code,
                      values={"decode_passes": len(decode), "prefill_passes": len(others), "ratio": round(ratio, 1)})


def _generation(phases: list[str]) -> bool:
    """The order generation runs in: a prefill first, more decode passes than prefills, and decode passes back to
    back somewhere (a model whose passes alternate between two shapes, such as an image and a text tower, is no
    generation)."""
    decode = [p == ranges.DECODE for p in phases]
    return (bool(phases) and phases[0] == ranges.PREFILL and sum(decode) >= max(2, len(phases) - sum(decode) + 1)
            and any(a and b for a, b in zip(decode, decode[1:], strict=False)))


def _median(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0


def first_projection_rows(op_name: str | None, input_dims: str | None) -> int | None:
    """M (the rows multiplied) of a projection from its op's recorded input shapes."""
    if not op_name or not input_dims:
        return None
    try:
        dims = json.loads(input_dims)
    except ValueError:
        return None
    if not isinstance(dims, list):
        return None
    shapes = [d for d in dims if isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)]
    if not shapes:
        return None
    first = shapes[0]
    rows = 1
    for x in first[:-1]:
        rows *= x
    return rows if rows > 0 else None


def phase_level(found: PassPhases) -> StructureLevel:
    """The `phases` level of run.json's structure: what told prefill from decode, or why nothing did."""
    if found.evidence is not None:
        return StructureLevel(level="phases", status="inferred", evidence=found.evidence, code=found.code,
                              values=found.values, count=sum(p == ranges.PREFILL for p in found.phases))
    reasons = {
        "no_passes": "no forward pass found",
        "same_shapes": "every pass multiplies the same number of rows: nothing tells prefill from decode",
        "no_repeat": "no two passes launch the same kernels: no decode to tell a prefill from",
        "all_alike": "every pass launches the same kernels: nothing tells prefill from decode",
        "not_slower": "the passes that differ from the repeated ones are not slower: not told a prefill",
        "not_generation": "the passes do not run as generation does (a prefill first, then more decode passes, some "
                          "back to back): nothing is called prefill or decode",
    }
    return StructureLevel(level="phases", status="unknown", code=found.code, values=found.values,
                          reason=reasons.get(found.code or "", found.code))
