"""summary.json `structure`: forward passes, prefill and decode steps, decoder layers and training steps of a run,
where they came from, and why a level stayed unknown (docs/run-format.md)."""

from __future__ import annotations

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.structure.training_phases import TRAINING_PHASES
from kernelscope.contracts.run_info import AttributionInfo
from kernelscope.contracts.summary import StructureSummary

_INFERRED = "inferred"


def structure_summary(kernels: pl.DataFrame, attribution: AttributionInfo | None) -> StructureSummary:
    sources = set(kernels["attribution_source"].drop_nulls().unique().to_list()) \
        if "attribution_source" in kernels.columns else set()
    source = "mixed" if _INFERRED in sources and len(sources) > 1 else _INFERRED if sources == {_INFERRED} \
        else "annotations" if sources else "none"
    ranks = max(int(kernels["rank"].n_unique()), 1)
    phases = set(kernels["phase"].unique().to_list())

    def steps(phase: str) -> int:
        """A phase's steps on one rank: its distinct step numbers (per generation), else one per generation."""
        rows = kernels.filter(pl.col("phase") == phase)
        if rows.height == 0:
            return 0
        numbered = rows.filter(pl.col("step").is_not_null())
        if numbered.height:
            return numbered.select("rank", "generation", "step").unique().height // ranks
        return max(rows.select("rank", "generation").unique().height // ranks, 1)

    forward = [p for p in (ranges.PREFILL, ranges.MIXED, ranges.DECODE) if p in phases]
    unknown_steps = kernels.filter((pl.col("phase") == ranges.UNKNOWN) & pl.col("step").is_not_null())
    passes = sum(steps(p) for p in forward) + (steps(ranges.UNKNOWN) if unknown_steps.height else 0)
    training = [p for p in TRAINING_PHASES if p in phases]
    layers = kernels["layer"].drop_nulls()
    unknown = {level.level: level.reason or "" for level in (attribution.structure if attribution else [])
               if level.status == "unknown"}
    return StructureSummary(
        source=source,
        forward_passes=passes or None,
        prefill_steps=steps(ranges.PREFILL) if forward else None,
        decode_steps=steps(ranges.DECODE) if forward else None,
        layers=int(layers.n_unique()) if layers.len() else None,
        training_steps=max(steps(p) for p in training) if training else None,
        unknown=unknown,
    )
