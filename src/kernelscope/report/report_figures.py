"""The figures of a run's report planned as jobs for the figure helpers (figure_jobs): histograms of each phase's launches, roofline charts of each phase with points, Nsight Compute figures; each language's version named by the report's key, and the files a figure came out as."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.analyze.hardware import Ceilings
from kernelscope.analyze.report_tables import (
    ReportTables,
    RooflineTables,
)
from kernelscope.report import figure_formats
from kernelscope.report.figure_inputs import HistogramPanel, histogram_columns, histogram_panels, words_for
from kernelscope.report.figure_jobs import FigureJob


def figure_words_of(lang: str) -> dict[str, Any]:
    """The words of `lang`'s figures, with the fonts they need ("fonts"; none for English)."""
    words = words_for(lang)
    return {**words, "fonts": tuple(words["fonts"] or ()) if lang != "en" else ()}


def figure_files_by_key(drawn: dict[str, list[Path] | None], jobs: dict[str, list[FigureJob]]) -> dict[str, dict[str, list[Path]]]:
    """Per language, each figure's files by the report's key. A figure whose language needs a font this machine
    lacks (Chinese without a CJK font) is the English one."""
    english = {job.key.removesuffix("@en"): drawn[job.key] or [] for job in jobs["en"]}
    out: dict[str, dict[str, list[Path]]] = {}
    for lang, lang_jobs in jobs.items():
        out[lang] = {}
        for job in lang_jobs:
            key = job.key.removesuffix(f"@{lang}")
            paths = drawn[job.key]
            out[lang][key] = paths if paths is not None else english.get(key, [])
    return out


def _job(key: str, function: str, args: tuple[Any, ...], directory: Path, lang: str, words: dict[str, Any],
         **kwargs: Any) -> FigureJob:
    """A figure of `lang`: English figures are named <key>.png, the others <key>.<lang>.png."""
    stem = key if lang == "en" else f"{key}.{lang}"
    return FigureJob(f"{key}@{lang}", function, (*args, directory, stem), {"words": words, **kwargs}, lang,
                     words["fonts"], tuple(figure_formats.figure_files(directory, stem)), figure=key)


def _phase_label(words: dict[str, Any], phase: str, device: str) -> str:
    phase_word = words["terms"].get(phase, phase)
    return words["on_device"].format(phase=phase_word, device=device) if device else phase_word


def phase_histogram_panels(kernels: pl.DataFrame, cpu_run: bool) -> dict[str, list[HistogramPanel]]:
    """Per phase, the histograms of its single launches (not summary rows), binned."""
    needed = [c for c in histogram_columns() if c in kernels.columns]
    launches = kernels.select(needed).filter(pl.col("instances") == 1)
    return {phase: histogram_panels(launches.filter(pl.col("phase") == phase), cpu_run)
            for phase in kernels["phase"].unique(maintain_order=True).to_list()}


def histogram_jobs(launches: dict[str, list[HistogramPanel]], directory: Path, device: str, cpu_run: bool, lang: str,
                    words: dict[str, Any]) -> list[FigureJob]:
    """Per phase, the histograms of its single launches; they need no ceilings and no report table, so they are
    drawn while the tables are computed. Binned here: a helper is sent the bins, not the launches."""
    jobs = []
    for phase, panels in launches.items():
        if panels:
            title = words["histograms_title_cpu" if cpu_run else "histograms_title"].format(
                label=_phase_label(words, phase, device))
            jobs.append(_job(f"histograms_{phase}", "binned_histograms", (panels, title), directory, lang, words,
                             cpu_run=cpu_run))
    return jobs


def _roofline_points(tables: ReportTables) -> dict[str, pl.DataFrame]:
    """Per phase with roofline points, the points with their kernels' shares of the roofs."""
    shared = {phase: _with_roof_shares(phase_tables.roofline_points, phase_tables.roofline_kernels)
              for phase, phase_tables in tables.by_phase.items() if phase_tables.roofline_points is not None}
    return {phase: points for phase, points in shared.items() if points.height}


def points_with_shares(roofline: dict[str, RooflineTables]) -> dict[str, pl.DataFrame]:
    """_roofline_points from the roofline tables alone (before the other report tables exist)."""
    shared = {phase: _with_roof_shares(tables.points, tables.kernels) for phase, tables in roofline.items()}
    return {phase: points for phase, points in shared.items() if points.height}


def _chart_jobs(tables: ReportTables, directory: Path, device: str, lang: str, words: dict[str, Any],
                roofline_points: dict[str, pl.DataFrame] | None = None) -> list[FigureJob]:
    """Roofline charts per phase when the device has ceilings; Nsight Compute figures when measurements exist.
    `roofline_points`: _roofline_points(tables), where the caller shares them between languages."""
    points = roofline_points if roofline_points is not None else _roofline_points(tables)
    return (roofline_jobs(points, tables.ceilings, directory, device, lang, words)
            + measured_jobs(tables, directory, device, lang, words))


def roofline_jobs(roofline_points: dict[str, pl.DataFrame], ceilings: Ceilings | None, directory: Path,
                   device: str, lang: str, words: dict[str, Any]) -> list[FigureJob]:
    """The three roofline charts of each phase with points, when the device has ceilings."""
    jobs: list[FigureJob] = []
    if ceilings is None:
        return jobs
    for phase, points in roofline_points.items():
        label = _phase_label(words, phase, device)
        for key, function, title in (("roofline", "roofline_physical", "roofline_title"),
                                     ("roofline_normalized", "roofline_normalized", "normalized_title"),
                                     ("roofline_top", "per_kernel_rooflines", "top_title")):
            jobs.append(_job(f"{key}_{phase}", function, (points, ceilings, words[title].format(label=label)),
                             directory, lang, words))
    return jobs


def measured_jobs(tables: ReportTables, directory: Path, device: str, lang: str, words: dict[str, Any]
                   ) -> list[FigureJob]:
    """The Nsight Compute figures, when the run has measurements."""
    jobs: list[FigureJob] = []
    measured, ceilings = tables.measured, tables.ceilings
    if measured is not None and measured.kernels.height:
        phase_word = words["terms"].get(measured.phase, measured.phase)
        jobs.append(_job("ncu_histograms", "measured_histograms",
                         (measured.launches, words["ncu_histograms_title"].format(phase=phase_word)),
                         directory, lang, words))
        if ceilings is not None:
            title = words["ncu_roofline_title"].format(label=_phase_label(words, measured.phase, device))
            jobs.append(_job("ncu_roofline", "measured_roofline", (measured.kernels, ceilings, title), directory,
                             lang, words))
    return jobs


def _with_roof_shares(points: pl.DataFrame, roofline_kernels: pl.DataFrame | None) -> pl.DataFrame:
    """The points with their shares of the compute and bandwidth roofs (as the roofline table gives them), so a
    figure can mark those above a roof. A kernel recorded without duration has no rate: no place on a chart."""
    points = points.filter(pl.col("dur_ns") > 0)
    if roofline_kernels is None or "compute_roof_pct" in points.columns:
        return points
    shares = roofline_kernels.select("name", "compute_roof_pct", "memory_roof_pct").unique("name")
    return points.join(shares, on="name", how="left")
