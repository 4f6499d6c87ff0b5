"""Figures of a real H200 run: labels never overlap each other or the legend and stay inside their axes, kernels
without FLOPs sit on a band of their own (no made-up intensity), points above a roof are ringed, the Chinese
figures draw Chinese words with a CJK font, and the histogram panels bin every value of the run."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
import pytest

from kernelscope.report import (
    figure_base,
    figure_jobs,
    figures,
    report_figures,
    roofline_figures,
)
from kernelscope.report.figure_inputs import words_for
from tests.unit import figure_cases

tables = figure_cases.tables  # the run's report tables, a fixture


@pytest.fixture
def kept(monkeypatch):
    """The figures drawn, kept open instead of written."""
    out: list[plt.Figure] = []
    monkeypatch.setattr(figure_base, "save_figure", lambda fig, directory, stem, fitted=False: out.append(fig) or [])
    yield out
    for fig in out:
        plt.close(fig)


def _points(tables, phase="decode") -> pl.DataFrame:
    return report_figures._with_roof_shares(tables.by_phase[phase].roofline_points, tables.by_phase[phase].roofline_kernels)


def _label_boxes(fig: plt.Figure) -> list:
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for ax in fig.axes for t in ax.texts if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_roofline_labels_do_not_overlap(tables, kept, tmp_path, phase, lang):
    words = words_for(lang)
    font = figures.cjk_font(words["fonts"]) if lang != "en" else None
    if lang != "en" and font is None:
        pytest.skip("no CJK font installed (scripts/install-test-deps.sh installs fonts-wqy-zenhei)")
    points = _points(tables, phase)
    with plt.rc_context({"font.family": [font, "DejaVu Sans"]} if font else {}):
        figures.roofline_physical(points, tables.ceilings, "t", tmp_path, "r", label_top=12, words=words)
    (fig,) = kept
    ax = fig.axes[-1]
    renderer = fig.canvas.get_renderer()
    ridge_word = words["ridge"].split("{")[0]
    labels = [t for t in ax.texts if t.get_text() and not t.get_text().startswith(ridge_word)]
    ridges = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().startswith(ridge_word)]
    assert len(labels) >= 4 and ridges  # most of the top kernels are named; each roof's ridge point is
    boxes = [t.get_window_extent(renderer) for t in labels]
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not box.overlaps(legend), labels[i].get_text()
        assert not any(box.overlaps(ridge) for ridge in ridges), labels[i].get_text()
        for other in boxes[i + 1:]:
            assert not box.overlaps(other), labels[i].get_text()


def test_kernels_without_flops_are_on_their_own_band(tables, kept, tmp_path):
    points = _points(tables)
    no_flops = points.filter(pl.col("flops") <= 0)
    assert no_flops.height  # copies and casts do no arithmetic
    figures.roofline_physical(points, tables.ceilings, "t", tmp_path, "r")
    figures.roofline_normalized(points, tables.ceilings, "t", tmp_path, "n")
    expected = sorted(no_flops["bytes_per_s"].fill_null(0) / tables.ceilings.bandwidth * 100)
    for fig in kept:
        band, main = fig.axes[0], fig.axes[-1]
        band_x = [x for c in band.collections if c.get_facecolor().size for x, _ in c.get_offsets()]
        assert len(band_x) == no_flops.height and set(band_x) == {0.5}
        # Points below the plotted floor are drawn at it and marked (open triangles), one mark each.
        marks = [y for c in band.collections if not c.get_facecolor().size for _, y in c.get_offsets()]
        assert len(marks) == sum(v < roofline_figures.BAND_FLOOR for v in expected) and set(marks) <= {roofline_figures.BAND_FLOOR}
        main_points = sum(len(c.get_offsets()) for c in main.collections if c.get_facecolor().size)
        assert main_points == points.height - no_flops.height
    # The bandwidth shares on the band are the table's (bytes/s over the ceiling), in percent.
    drawn = sorted(y for c in kept[0].axes[0].collections if c.get_facecolor().size for _, y in c.get_offsets())
    assert drawn == pytest.approx([max(v, 1e-4) for v in expected])


def test_small_multiples_draw_no_made_up_intensity(tables, kept, tmp_path):
    points = _points(tables)
    top = points.head(8)
    figures.per_kernel_rooflines(points, tables.ceilings, "t", tmp_path, "top")
    (fig,) = kept
    panels = [ax for ax in fig.axes if ax.get_visible()]
    for ax, row in zip(panels, top.iter_rows(named=True), strict=True):
        if row["flops"] <= 0:
            assert ax.get_xscale() == "linear" and not ax.collections  # a bar of its bandwidth share
        else:
            ((x, _),) = ax.collections[0].get_offsets()
            assert x == pytest.approx(row["intensity"])


def test_points_above_a_roof_are_ringed(tables, kept, tmp_path):
    points = _points(tables)
    above = points.filter((pl.col("flops") > 0) & ((pl.col("memory_roof_pct") > 100) | (pl.col("compute_roof_pct") > 100)))
    figures.roofline_physical(points, tables.ceilings, "t", tmp_path, "r")
    (fig,) = kept
    labels = [t.get_text().replace("\n", " ") for t in fig.axes[-1].get_legend().get_texts()]  # wrapped
    assert (words_for()["above_roof"] in labels) == (above.height > 0)


def test_chinese_figures_use_chinese_words_and_a_cjk_font(tables, tmp_path):
    fonts = words_for("zh")["fonts"]
    font = figures.cjk_font(fonts)
    if font is None:
        # CI (KERNELSCOPE_REQUIRE_BROWSER=1) must have the font: its browser test shows the Chinese page.
        assert not os.environ.get("KERNELSCOPE_REQUIRE_BROWSER"), \
            "no CJK font installed, though CI requires one (scripts/install-test-deps.sh installs fonts-wqy-zenhei)"
        pytest.skip("no CJK font installed (scripts/install-test-deps.sh installs fonts-wqy-zenhei)")
    jobs = report_figures._chart_jobs(tables, tmp_path, "NVIDIA H200", "zh", report_figures.figure_words_of("zh"))
    assert {j.key.split("@")[1] for j in jobs} == {"zh"} and all(font in j.fonts for j in jobs)
    roofline = next(j for j in jobs if j.function == "roofline_physical")
    assert roofline.args[-1].endswith(".zh") and "屋脊线" in roofline.args[2]
    key, paths = figure_jobs._draw(roofline, ("png",))
    assert key == roofline.key and paths == [tmp_path / f"{roofline.args[-1]}.png"] and paths[0].is_file()


def test_without_a_cjk_font_the_chinese_report_shows_the_english_figures(tables, tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "cjk_font", lambda families: None)
    jobs = {lang: report_figures._chart_jobs(tables, tmp_path, "NVIDIA H200", lang, report_figures.figure_words_of(lang))[:1]
            for lang in ("en", "zh")}
    drawn = dict(figure_jobs._draw(job, ("png",)) for lang_jobs in jobs.values() for job in lang_jobs)
    assert drawn[jobs["zh"][0].key] is None  # not drawn: no font for its words
    paths = report_figures.figure_files_by_key(drawn, jobs)
    assert paths["zh"] == paths["en"] and all(p.is_file() for ps in paths["en"].values() for p in ps)


def test_a_kernel_label_keeps_off_the_texts_already_in_the_axes():
    """A ridge point's value sits where a kernel's label would go first: the label takes another place."""
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        ax.scatter([5], [5])
        renderer = fig.canvas.get_renderer()
        first = ax.annotate("cuBLASLt GEMM (BF16, tile 64x16x64)", (5, 5), textcoords="offset points", xytext=(6, 4),
                            fontsize=6.5, va="bottom")
        where_first_goes = first.get_window_extent(renderer)
        first.remove()
        ridge = ax.annotate("ridge 12", (5, 5), textcoords="offset points", xytext=(8, 6), fontsize=7)
        assert ridge.get_window_extent(renderer).overlaps(where_first_goes)
        (label,) = figures.place_labels(ax, [(5, 5, "cuBLASLt GEMM (BF16, tile 64x16x64)")])
        assert not label.get_window_extent(renderer).overlaps(ridge.get_window_extent(renderer))
    finally:
        plt.close(fig)


def test_histogram_panels_bin_every_value_a_launch_has(tables):
    """Each panel of a real run's histograms holds every launch's finite value (positive where its bins are
    logarithmic), in bins spanning them: counted against the rows read in plain Python."""
    import math

    import numpy as np

    from kernelscope.report.figure_inputs import HISTOGRAMS, histogram_panels

    decode = tables.kernels.filter(pl.col("phase") == "decode")
    panels = {panel.key: panel for panel in histogram_panels(decode)}
    checked = 0
    for column, scale, _log in HISTOGRAMS:
        if column == "blocks":
            rows = [gx * gy * gz if None not in (gx, gy, gz) else None
                    for gx, gy, gz in decode.select("grid_x", "grid_y", "grid_z").iter_rows()]
        elif column == "threads_per_block":
            rows = [bx * by * bz if None not in (bx, by, bz) else None
                    for bx, by, bz in decode.select("block_x", "block_y", "block_z").iter_rows()]
        else:
            rows = decode[column].to_list()
        values = [float(v) * scale for v in rows if v is not None and math.isfinite(float(v) * scale)]
        key = "duration" if column == "dur_ns" else column
        if not values:
            assert key not in panels
            continue
        panel = panels[key]
        kept = [v for v in values if v > 0] if panel.log_x else values
        assert int(panel.counts.sum()) == len(kept), column
        assert panel.edges[0] == pytest.approx(min(kept)) and panel.edges[-1] == pytest.approx(max(kept))
        assert (panel.counts == np.histogram(kept, bins=panel.edges)[0]).all(), column
        checked += 1
    assert checked >= 6


def test_measured_histogram_panels_bin_every_measured_value(tables):
    """Nsight Compute's panels likewise hold every measured launch's value (the run measured its decode kernels)."""
    import math

    from kernelscope.report.figure_inputs import MEASURED_HISTOGRAMS, measured_histogram_panels

    launches = tables.measured.launches
    panels = {panel.key: panel for panel in measured_histogram_panels(launches)}
    checked = 0
    for column, key, _log in MEASURED_HISTOGRAMS:
        if column not in launches.columns or key not in panels:
            continue
        values = [float(v) for v in launches[column].to_list() if v is not None and math.isfinite(float(v))]
        kept = [v for v in values if v > 0] if panels[key].log_x else values
        assert int(panels[key].counts.sum()) == len(kept), column
        checked += 1
    assert checked >= 5


def test_roofline_labels_are_whole_names_with_leader_lines(tables, kept, tmp_path):
    points = _points(tables)
    figures.roofline_physical(points, tables.ceilings, "t", tmp_path, "r", label_top=12)
    (fig,) = kept
    ax = fig.axes[-1]
    ridge_word = words_for()["ridge"].split("{")[0]
    labels = [t for t in ax.texts if t.get_text() and not t.get_text().startswith(ridge_word)]
    names = set(points.filter(pl.col("flops") > 0).head(12)["label"].to_list())
    assert labels
    for label in labels:
        text = label.get_text().replace("\n", " ")
        assert "…" not in text and text in names  # the whole name, wrapped onto lines, never cut
        assert label.arrow_patch is not None  # a leader line to its point
    # The legend sits beside the axes: over no point, name or ridge value.
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_small_multiples_have_axis_titles(tables, kept, tmp_path):
    words = words_for()
    figures.per_kernel_rooflines(_points(tables), tables.ceilings, "t", tmp_path, "top", words=words)
    (fig,) = kept
    texts = [t.get_text() for t in fig.texts]
    assert words["panel_x"] in texts and words["panel_y"] in texts


def test_durations_above_ten_ms_read_in_ms():
    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.load.sources import read_trace
    from kernelscope.report.figure_inputs import histogram_panels
    from tests.trace_reference import read_events

    trace = Path(__file__).parents[1] / "data" / "public" / "tokenomics" / "llama_trace_4layers0_with_annotations.json.gz"
    longest_us = max(float(e["dur"]) for e in read_events(trace) if e.get("cat") == "kernel" and e.get("ph") == "X")
    assert longest_us > 10_000
    kernels, _ = attribute(read_trace(trace))
    (duration,) = [p for p in histogram_panels(kernels) if p.key.startswith("duration")]
    assert duration.key == "duration_ms" and duration.edges[-1] == pytest.approx(longest_us / 1e3, rel=1e-6)
    assert "(ms)" in words_for()["duration_ms"]
    short = histogram_panels(kernels.filter(pl.col("dur_ns") < 5_000_000))
    assert [p.key for p in short if p.key.startswith("duration")] == ["duration"]


def test_the_step_strip_has_a_scale(tables):
    from kernelscope.report import explorer

    steps = tables.every_step
    decode = steps.filter(pl.col("phase") == "decode")["device_time_ns"].cast(pl.Float64).to_list()
    svg = explorer.step_strip_svg(steps, "from 0 to {top}; median {median}")
    assert svg.count('class="scale"') == 2
    ordered = sorted(decode)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else (ordered[len(ordered) // 2 - 1]
                                                                  + ordered[len(ordered) // 2]) / 2
    from kernelscope.report.formatting import duration

    assert f"from 0 to {duration(max(decode))}; median {duration(median)}" in svg
