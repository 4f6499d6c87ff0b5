"""The report's Energy section beyond its phase table: the power-over-time figure's jobs and the energy split's
words (docs/energy.md). The numbers come from analyze/energy_timeline and analyze/energy_split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from kernelscope.analyze.energy_timeline import PowerTimeline, power_timeline
from kernelscope.contracts.energy_split import DETERMINED, IDLE
from kernelscope.contracts.run import Run
from kernelscope.report import figure_formats
from kernelscope.report.figure_jobs import FigureJob

FIGURE = "energy_power"


def run_timeline(run: Run) -> tuple[PowerTimeline | None, str | None]:
    """The figure's data, or why there is none (one line; None where the run has no energy section at all)."""
    if run.info.energy is None:
        return None, None
    if run.energy is None:
        return None, "no power.parquet in the run"
    stages = [(s.stage, s.started_ns, s.ended_ns) for s in run.info.energy.stages
              if s.started_ns is not None and s.ended_ns is not None and s.ended_ns > s.started_ns]
    timeline = power_timeline(run.energy.samples, run.energy.windows, stages or None)
    if timeline is None:
        return None, run.energy.problem or "power.parquet holds fewer than two usable power reads"
    return timeline, None


def energy_figure_jobs(timeline: PowerTimeline | None, directory: Path, lang: str, words: dict[str, Any]
                       ) -> list[FigureJob]:
    """The figure in `lang` (figures/energy_power.png, energy_power.<lang>.png); none without data."""
    if timeline is None:
        return []
    stem = FIGURE if lang == "en" else f"{FIGURE}.{lang}"
    return [FigureJob(f"{FIGURE}@{lang}", "power_timeline_chart", (timeline, words["power_title"], directory, stem),
                      {"words": words}, lang, words["fonts"], tuple(figure_formats.figure_files(directory, stem)),
                      figure=FIGURE)]


def split_context(run: Run) -> dict[str, Any] | None:
    """The split for the words: determined, its terms (idle first) and per-token shares; otherwise the reason."""
    energy = run.info.energy
    split = energy.split if energy is not None else msgspec.UNSET
    if split is msgspec.UNSET or split is None:
        return None
    out = msgspec.to_builtins(split)
    out["determined"] = split.status == DETERMINED
    out["classes"] = [t.term for t in split.terms if t.term != IDLE]
    out["idle"] = next((msgspec.to_builtins(t) for t in split.terms if t.term == IDLE), None)
    return out
