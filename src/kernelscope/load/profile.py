"""The in-memory form of a run: its tables and its metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

INSTANCES = "instances"


def with_instances(kernels: pl.DataFrame) -> pl.DataFrame:
    """kernels with an int64 `instances` column, the launches each row stands for (docs/run-format.md): 1 where
    it is missing (runs written before the column existed) or null."""
    if kernels.width == 0:
        return kernels
    if INSTANCES not in kernels.columns:
        return kernels.with_columns(pl.lit(1, dtype=pl.Int64).alias(INSTANCES))
    return kernels.with_columns(pl.col(INSTANCES).cast(pl.Int64).fill_null(1))


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

    def layer_types_of(self, phase: str) -> dict[int, str]:
        """The layer types that number a phase's layers: a model stage's own (run.json model.stages: a vision
        encoder's layers restart at 0), else the decoder's."""
        stage = ((self.run.get("model") or {}).get("stages") or {}).get(phase)
        if stage is None:
            return self.layer_types
        return {int(k): v for k, v in (stage.get("layer_types") or {}).items()}
