"""The report's critical-path section: its tables (per phase, and what is on each phase's path), its CSV files
(tables/critical_path_<phase>.csv: every segment; critical_path_steps.csv: every step) and its figure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.analyze.paths.path_tables import PathTables
from kernelscope.analyze.paths.path_walk import CLASSES
from kernelscope.report import figure_formats
from kernelscope.report.figure_jobs import FigureJob

FIGURE = "critical_path"


def path_context(tables: PathTables | None, table: Callable[[str, pl.DataFrame | None], str | None]
                 ) -> dict[str, Any] | None:
    """What the template's section needs; None for runs without a timeline."""
    if tables is None:
        return None
    steps = tables.path.steps
    ranks = len(set(tables.path.graph.rank.tolist()))
    crossing = steps.filter(pl.col("ranks_on_path") > 1).height
    return {
        "phases": table("critical_path", tables.phases),
        "top": {phase: table("critical_path_top", top) for phase, top in tables.top.items()},
        "steps": steps.height,
        "ranks": ranks,
        "crossing": crossing,
        "whole_run": steps.height == 1 and steps["step"].is_null().all() and steps["phase"][0] == "unknown",
        "typical": tables.path.graph.typical,
    }


def path_csv_frames(tables: PathTables | None) -> dict[str, pl.DataFrame]:
    """tables/critical_path_<phase> (the segments of that phase's steps, in time order) and critical_path_steps."""
    if tables is None:
        return {}
    frames = {f"critical_path_{phase}": tables.path.segments.filter(pl.col("phase") == phase)
              for phase in tables.phases["phase"].to_list()}
    frames["critical_path_steps"] = tables.path.steps
    return frames


def figure_data(tables: PathTables) -> list[tuple[str, int, list[float]]]:
    """Per phase: its name, its steps and the mean step's path time per class (ms), in CLASSES order."""
    rows = tables.path.steps.group_by("phase", maintain_order=True).agg(
        pl.len().alias("steps"), *[pl.col(f"{c}_ns").mean().alias(c) for c in CLASSES])
    return [(row["phase"], row["steps"], [row[c] / 1e6 for c in CLASSES]) for row in rows.iter_rows(named=True)]


def path_figure_jobs(tables: PathTables | None, directory: Path, lang: str, words: dict[str, Any]) -> list[FigureJob]:
    """The figure of the section in `lang` (figures/critical_path.png, critical_path.<lang>.png)."""
    if tables is None:
        return []
    stem = FIGURE if lang == "en" else f"{FIGURE}.{lang}"
    return [FigureJob(f"{FIGURE}@{lang}", "critical_path_bars", (figure_data(tables), directory, stem),
                      {"words": words}, lang, words["fonts"],
                      tuple(figure_formats.figure_files(directory, stem)), figure=FIGURE)]
