"""Figure jobs of a real H200 run: drawn by helper processes as this process would draw them, each language of a
figure drawn together and byte for byte as drawn alone, a language without a font told before its set is drawn,
and the figure formats option."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from kernelscope import workers
from kernelscope.report import (
    figure_formats,
    figure_jobs,
    figures,
    report_figures,
)
from kernelscope.report.figure_inputs import words_for
from tests.unit import figure_cases
from tests.unit.figure_cases import RUN

tables = figure_cases.tables  # the run's report tables, a fixture


def _all_jobs(tables, directory: Path) -> tuple[list, list]:
    words = report_figures.figure_words_of("en")
    histograms = report_figures.histogram_jobs(report_figures.phase_histogram_panels(tables.kernels, False), directory, "NVIDIA H200", False,
                                        "en", words)
    return histograms, report_figures._chart_jobs(tables, directory, "NVIDIA H200", "en", words)


@pytest.mark.slow
def test_helpers_draw_every_job_once_with_the_names_one_process_gives(tables, tmp_path):
    """Jobs submitted in two rounds (histograms first, charts once the tables exist) to two helper processes: each
    job's own files, every file once, named as this process alone names them."""
    histograms, charts = _all_jobs(tables, tmp_path / "two")
    with figure_jobs.FigureDrawing(helpers=2) as drawing:
        drawing.submit(histograms)
        drawing.submit(charts)
        drawn = drawing.collect()
    assert sorted(drawn) == sorted(job.key for job in histograms + charts)
    files = [p for paths in drawn.values() for p in paths]
    assert len(files) == len(set(files)) == len(drawn) and all(p.parent == tmp_path / "two" for p in files)
    assert all(p.is_file() for p in files)
    alone_h, alone_c = _all_jobs(tables, tmp_path / "one")
    with figure_jobs.FigureDrawing(helpers=0) as drawing:
        drawing.submit(alone_h[:1] + alone_c[:1])
        alone = drawing.collect()
    assert {k: [p.name for p in v] for k, v in alone.items()} == {k: [p.name for p in drawn[k]] for k in alone}


@pytest.mark.parametrize(("allowed", "host", "expected"), [
    ({0, 1}, 64, 2),  # a container's two cores on a big host: two helpers, not one per host core
    ({0}, 64, 0),  # one core: drawn in this process
    (set(range(64)), 64, figure_jobs.MAX_HELPERS),
    (set(range(3)), 3, 3),
])
def test_figure_helpers_follow_the_cores_this_process_may_use(monkeypatch, allowed, host, expected):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: allowed, raising=False)
    monkeypatch.setattr(workers.os, "cpu_count", lambda: host)
    monkeypatch.setattr(figure_jobs, "main_module_importable", lambda: True)
    assert figure_jobs.default_helpers() == expected


def test_a_job_that_fails_in_a_helper_raises_its_own_error_here(tmp_path):
    bad = figure_jobs.FigureJob("bad@en", "no_such_drawing", (tmp_path, "bad"))
    with figure_jobs.FigureDrawing(helpers=1) as drawing, pytest.raises(AttributeError, match="no_such_drawing"):
        drawing.submit([bad])
        drawing.collect()


@pytest.mark.slow
def test_the_report_process_itself_never_loads_matplotlib(tmp_path):
    """Where helper processes draw the figures, the process that writes the report computes tables and text only:
    matplotlib (a third of a second to import) is loaded by the fork server the helpers start from."""
    import shutil
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("report"))
    script = tmp_path / "render.py"  # a file, not `-c`: helpers re-import the main module
    script.write_text("import sys\nfrom pathlib import Path\nfrom kernelscope.pipeline import rerender\n\n"
                      "if __name__ == '__main__':\n"
                      f"    rerender(Path({str(run)!r}))\n"
                      "    print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib')[:3])\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"
    figures_dir = run / "report" / "figures"
    assert sorted(p.name for p in figures_dir.iterdir()) and all(p.stat().st_size for p in figures_dir.iterdir())


@pytest.mark.slow
def test_the_files_a_job_expects_are_the_files_it_writes(tables, tmp_path):
    """The report links each figure before it is drawn (FigureDrawing.expected): every job of the real run names
    beforehand exactly the files its drawing writes."""
    histograms, charts = _all_jobs(tables, tmp_path)
    with figure_jobs.FigureDrawing(helpers=2) as drawing:
        drawing.submit(histograms + charts)
        expected = drawing.expected()
        drawn = drawing.collect()
    assert sorted(expected) == sorted(drawn)
    assert all(drawn[key] and expected[key] == drawn[key] for key in drawn)


@pytest.mark.slow
def test_a_chinese_report_written_before_its_figures_links_the_english_ones_when_no_font_draws_them(tmp_path,
                                                                                                   monkeypatch):
    """Written while the figures are drawn, report.zh.md first links the Chinese figures it expects; with no CJK
    font none is drawn, and the report is written again with the English figures, which its page embeds."""
    import base64
    import re
    import shutil

    monkeypatch.setattr(figures, "cjk_font", lambda families: None)
    monkeypatch.setattr(figure_jobs, "default_helpers", lambda: 0)  # drawn here, where the font is missing
    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir, ignore=shutil.ignore_patterns("report"))
    from kernelscope.pipeline import rerender

    rerender(run_dir)
    report = run_dir / "report"
    links = re.findall(r"\]\((figures/[^)]+)\)", (report / "report.zh.md").read_text(encoding="utf-8"))
    english = re.findall(r"\]\((figures/[^)]+)\)", (report / "report.md").read_text(encoding="utf-8"))
    assert links and links == english and not any(".zh." in link for link in links)
    assert not list((report / "figures").glob("*.zh.*"))
    page = (report / "report.zh.html").read_text(encoding="utf-8")
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == len(links)
    assert base64.b64decode(embedded[0]) == (report / links[0]).read_bytes()


ENERGY_RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-1.5b-b8-p512-energy"


def _report_jobs(tables, directory: Path) -> list:
    """Every figure job of the real run's report, English and Chinese, built as the report builds them, and the
    power figure of the committed energy run (the fixture run has no energy pass)."""
    from kernelscope.load import rundir
    from kernelscope.report.energy_section import energy_figure_jobs, run_timeline

    launches = report_figures.phase_histogram_panels(tables.kernels, False)
    points = report_figures._roofline_points(tables)
    timeline, problem = run_timeline(rundir.read_run(ENERGY_RUN, ops=False))
    assert timeline is not None, problem
    jobs = []
    for lang in ("en", "zh"):
        words = report_figures.figure_words_of(lang)
        jobs += report_figures.histogram_jobs(launches, directory, "NVIDIA H200", False, lang, words)
        jobs += report_figures._chart_jobs(tables, directory, "NVIDIA H200", lang, words, points)
        jobs += energy_figure_jobs(timeline, directory, lang, words)
    return jobs


def _needs_cjk_font() -> None:
    if figures.cjk_font(words_for("zh")["fonts"]) is None:
        pytest.skip("no CJK font installed (scripts/install-test-deps.sh installs fonts-wqy-zenhei)")


def test_the_languages_of_one_figure_are_drawn_together_and_nothing_else_is(tables, tmp_path):
    jobs = _report_jobs(tables, tmp_path)
    sets = figure_jobs.job_sets(jobs)
    assert sorted(job.key for s in sets for job in s) == sorted(job.key for job in jobs)
    assert all(len(s) == 2 and {job.lang for job in s} == {"en", "zh"} and len({job.figure for job in s}) == 1
               for s in sets)
    assert {job.function for s in sets for job in s} <= figure_jobs.VERSIONED
    # Jobs whose data are other objects (even equal ones) are not taken for languages of one figure: roofline
    # points computed again for Chinese; the Nsight Compute tables are the same objects and still go together.
    english = [job for job in jobs if job.lang == "en"]
    redone = report_figures._chart_jobs(tables, tmp_path, "NVIDIA H200", "zh", report_figures.figure_words_of("zh"))
    for s in figure_jobs.job_sets(english + redone):
        assert len(s) == (2 if s[0].figure.startswith("ncu_") else 1), [job.key for job in s]


def test_the_drawing_functions_that_draw_versions_are_the_ones_the_planner_names():
    assert set(figures.VERSIONED) == figure_jobs.VERSIONED


@pytest.mark.slow
def test_a_figure_drawn_in_two_languages_at_once_is_byte_for_byte_each_drawn_alone(tables, tmp_path):
    """Shapes and ticks made once, words and fonts switched per language: the files are exactly the ones each
    language's job writes on its own, for every figure of the real run's report (both phases, Nsight Compute
    histograms included)."""
    _needs_cjk_font()
    together = tmp_path / "together"
    sets = figure_jobs.job_sets(_report_jobs(tables, together))
    assert "measured_histograms" in {s[0].function for s in sets}
    compared = 0
    for jobs in sets:
        drawn = dict(figure_jobs._draw_set(jobs, ("png", "svg")))
        for job in jobs:
            alone_job = figure_jobs.FigureJob(job.key, job.function, (*job.args[:-2], tmp_path / "alone", job.args[-1]),
                                              job.kwargs, job.lang, job.fonts)
            _, alone = figure_jobs._draw(alone_job, ("png", "svg"))
            assert [p.name for p in drawn[job.key]] == [p.name for p in alone] and len(alone) == 2
            png, svg = drawn[job.key]
            assert png.read_bytes() == alone[0].read_bytes(), png.name
            # SVG files carry their time of writing and random ids: their texts are compared.
            assert _svg_texts(svg) == _svg_texts(alone[1]) and _svg_texts(svg), svg.name
            compared += 1
    assert compared == 2 * len(sets)


def _svg_texts(path: Path) -> list[str]:
    import re

    return re.findall(r">([^<>]+)</text>", path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_in_a_set_the_language_without_a_font_is_not_drawn_and_the_other_is(tables, tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "cjk_font", lambda families: None)
    jobs = figure_jobs.job_sets(_report_jobs(tables, tmp_path))[0]
    drawn = dict(figure_jobs._draw_set(jobs, ("png",)))
    by_lang = {job.lang: drawn[job.key] for job in jobs}
    assert by_lang["zh"] is None
    assert by_lang["en"] and all(path.is_file() for path in by_lang["en"])
    assert not list(tmp_path.glob("*.zh.*"))


@pytest.mark.slow
def test_helpers_draw_both_languages_as_this_process_draws_them(tables, tmp_path):
    _needs_cjk_font()
    jobs = _report_jobs(tables, tmp_path / "helpers")
    with figure_jobs.FigureDrawing(helpers=2) as drawing:
        drawing.submit(jobs)
        drawn = drawing.collect()
    here = _report_jobs(tables, tmp_path / "here")
    with figure_jobs.FigureDrawing(helpers=0) as drawing:
        drawing.submit(here)
        alone = drawing.collect()
    assert sorted(drawn) == sorted(alone) == sorted(job.key for job in jobs)
    for key, paths in drawn.items():
        assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in alone[key]], key


def test_a_language_without_a_font_is_told_before_its_set_is_drawn(tables, tmp_path, monkeypatch):
    """The report writes its pages while the figures are drawn, on what it has heard: a Chinese figure that cannot
    be drawn is reported before the English one of its set is drawn, so the Chinese page links the English figure
    at once instead of being written a second time."""
    monkeypatch.setattr(figures, "cjk_font", lambda families: None)
    jobs = figure_jobs.job_sets(_report_jobs(tables, tmp_path))[0]
    outcomes = figure_jobs._draw_set(jobs, ("png",))
    key, paths = next(outcomes)
    assert key.endswith("@zh") and paths is None
    assert not list(tmp_path.iterdir())  # nothing drawn yet
    (english_key, english),  = list(outcomes)
    assert english_key.endswith("@en") and all(p.is_file() for p in english)


def _marked(words):
    """The words with marks around every string (format fields kept): other words, other widths, the same font."""
    if isinstance(words, dict):
        return {key: _marked(value) for key, value in words.items()}
    return f"Ωw {words} ·" if isinstance(words, str) else words


def _pixels(path: Path):
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGBA"))


@pytest.mark.slow
def test_png_versions_drawn_over_one_drawing_are_each_version_drawn_whole(tables, tmp_path):
    """PNG only: the languages of a figure share one drawing of what they have in common and paint only their
    words over it. For every figure of the real run's report, a second version whose every word is other (marked,
    so legends and labels take other sizes and places) comes out with exactly the pixels that matplotlib's whole
    drawing of that version alone gives, and so does the first."""
    together = tmp_path / "together"
    english = [job for job in _report_jobs(tables, together) if job.lang == "en"]
    compared = 0
    for job in english:
        other = figure_jobs.FigureJob(f"{job.key}_marked", job.function,
                                      (*job.args[:-3], f"Ωw {job.args[-3]}", job.args[-2], f"{job.args[-1]}.marked"),
                                      {**job.kwargs, "words": _marked(job.kwargs["words"])}, "xx", (), figure=job.figure)
        drawn = dict(figure_jobs._draw_set((job, other), ("png",)))
        for version in (job, other):
            alone = figure_jobs.FigureJob(version.key, version.function,
                                          (*version.args[:-2], tmp_path / "alone", version.args[-1]), version.kwargs,
                                          version.lang)
            _, paths = figure_jobs._draw(alone, ("png",))
            assert len(drawn[version.key]) == len(paths) == 1
            assert (_pixels(drawn[version.key][0]) == _pixels(paths[0])).all(), version.key
            compared += 1
    assert compared == 2 * len(english) and {job.function for job in english} == figures.VERSIONED.keys()


def test_a_version_that_sets_tick_labels_as_words_is_drawn_whole(tmp_path):
    """Tick labels are drawn once for every version; a version whose words replace them gets a whole drawing, so
    its own tick words are the ones in its file."""
    from kernelscope.report import figure_versions

    def draw(versions: list[str], directory: Path) -> list[Path]:
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([0, 1], [0, 1])

        def label(words: str) -> None:
            ax.set_xticks([0.25, 0.75], [f"{words} a", f"{words} b"])
            ax.set_title(words)

        written = figure_versions.save_png_versions(fig, versions, label, lambda words: [directory / f"{words}.png"])
        return [paths[0] for paths in written]

    together = draw(["first", "second"], tmp_path / "together")
    for path in together:
        (alone,) = draw([path.stem], tmp_path / "alone")
        assert alone != path and (_pixels(path) == _pixels(alone)).all(), path.name


@pytest.mark.parametrize(("text", "formats"), [("png", ("png",)), ("svg", ("png", "svg")), ("SVG, png", ("png", "svg")),
                                               ("none", ()), (" None ", ())])
def test_figure_formats_read_from_the_option(text, formats):
    assert figure_formats.parse(text) == formats


@pytest.mark.parametrize("text", ["none,png", "pdf", "", ","])
def test_figure_formats_refused(text):
    with pytest.raises(ValueError, match="figure formats are png and svg"):
        figure_formats.parse(text)


def test_no_figure_formats_draws_nothing_and_starts_no_helper(tables, tmp_path):
    """With `--figure-formats none` every job comes back with no files, none drawn here or by a helper."""
    token = figure_formats.chosen.set(())
    try:
        histograms, charts = _all_jobs(tables, tmp_path)
        with figure_jobs.FigureDrawing(helpers=2) as drawing:
            drawing.submit(histograms + charts)
            assert drawing.expected() == {job.key: [] for job in histograms + charts}
            drawn = drawing.collect()
            assert drawing._helpers == []
    finally:
        figure_formats.chosen.reset(token)
    assert drawn == {job.key: [] for job in histograms + charts} and drawn
    assert not any(tmp_path.iterdir())
