"""The ranges the what-if study and the report give around an estimate: the model's held-out spread
(data/projection.toml [uncertainty], benchmarks/whatif/held_out.py) as they word it."""

from __future__ import annotations

import math
from typing import Any

from kernelscope.analyze.projection.projection import ProjectionModel
from kernelscope.analyze.projection.whatif import WhatIf
from kernelscope.report import formatting as fmt


def spread_context(s: WhatIf) -> dict[str, Any] | None:
    """The estimate's range as the study words it: its relative width and which held-out projections it comes
    from (targets of the measuring device's family, or of another); None on the measuring device or without one."""
    spread = s.spread
    if not spread:
        return None
    same = s.source.family is not None and s.source.family == s.target.family
    return {"factor": f"{math.exp(spread):.2f}", "same_family": same, "family": s.source.family or ""}


def estimate_range(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"{fmt.duration(low)} – {fmt.duration(high)}"


def held_out(model: ProjectionModel) -> dict[str, str] | None:
    """The model's held-out spread as the report words it: ± percent onto a GPU of the same family, a factor onto
    another family (data/projection.toml [uncertainty]); None where the model ships none."""
    same = (model.uncertainty.get("same") or {}).get("*")
    other = (model.uncertainty.get("other") or {}).get("*")
    if same is None or other is None:
        return None
    return {"same_pct": f"{100 * (math.exp(same) - 1):.0f}", "other_factor": f"{math.exp(other):.2f}"}
