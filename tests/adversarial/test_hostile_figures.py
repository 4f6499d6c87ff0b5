"""Hostile names as the words of a figure drawn in two languages over one shared drawing (figure_versions): the
kernels of a real run's roofline renamed with the hostile payloads (markup, mathtext dollars, line breaks, control
characters, 5000 CJK characters) and a hostile phase name in the titles. Both versions are drawn, each with
exactly the pixels of its own whole drawing, and every kernel label reads as the name was written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.report_tables import report_tables
from kernelscope.load import rundir
from kernelscope.pipeline import run_ceilings
from kernelscope.report import figure_jobs, figures, report_figures, roofline_figures
from tests.adversarial.cases_kineto import HOSTILE_NAMES

RUN = Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
# The mathtext payloads first: the labelled kernels are the top ones.
PAYLOADS = ["$\\frac{a}{b}$ and $x_1$", "a$b$c\\$", "$", *HOSTILE_NAMES.values()]
PHASE = "pre<script>$x$</script>\n# fill"


@pytest.fixture(scope="module")
def points() -> tuple[pl.DataFrame, object]:
    run = with_costs_and_names(rundir.read_run(RUN))
    tables = report_tables(run, run_ceilings(run.info))
    decode = report_figures._roofline_points(tables)["decode"]
    names = (PAYLOADS * (decode.height // len(PAYLOADS) + 1))[: decode.height]
    return decode.with_columns(pl.Series("label", names)), tables.ceilings


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGBA"))


def test_hostile_words_over_one_drawing_are_each_versions_whole_drawing(points, tmp_path, monkeypatch):
    decode, ceilings = points
    placed: list[str] = []
    place = figures.place_labels

    def recording(ax, named, fontsize=6.5):
        labels = place(ax, named, fontsize)
        placed.extend(label.get_text() for label in labels)
        return labels

    monkeypatch.setattr(roofline_figures, "place_labels", recording)
    words = report_figures.figure_words_of("en")
    other = {**words, "ridge": "Ωw ridge {value}", "intensity": "Ωw intensity"}
    jobs = tuple(
        figure_jobs.FigureJob(f"roofline_{PHASE}@{lang}", "roofline_physical",
                              (decode, ceilings, f"{lang} {PHASE}", tmp_path / "together", f"r.{lang}"),
                              {"words": w}, lang, (), figure="roofline")
        for lang, w in (("en", words), ("xx", other)))
    drawn = dict(figure_jobs._draw_set(jobs, ("png",)))
    assert all(drawn[job.key] for job in jobs)
    for job in jobs:
        alone = figure_jobs.FigureJob(job.key, job.function, (*job.args[:-2], tmp_path / "alone", job.args[-1]),
                                      job.kwargs, job.lang)
        _, paths = figure_jobs._draw(alone, ("png",))
        assert (_pixels(drawn[job.key][0]) == _pixels(paths[0])).all(), job.key
    # Labels are the names as written: dollars escaped (no mathtext), shortened as every label is.
    assert placed and set(placed) <= {figures.short_label(name) for name in PAYLOADS}
    assert any("\\$" in text for text in placed)  # a mathtext payload was labelled, its dollars escaped
