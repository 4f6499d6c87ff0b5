"""The in-memory form of a run: its tables and its metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass
class Profile:
    """kernels: one row per device kernel / memcpy / memset (per leaf CPU op on CPU-only runs), attributed.
    ops: CPU ops and annotation ranges. run: the content of run.json."""

    kernels: pl.DataFrame
    ops: pl.DataFrame
    run: dict[str, Any] = field(default_factory=dict)
    ncu: pl.DataFrame | None = None  # Nsight Compute measurements of profiled launches, when collected

    @property
    def layer_types(self) -> dict[int, str]:
        types = (self.run.get("model") or {}).get("layer_types") or {}
        return {int(k): v for k, v in types.items()}
