"""Render a run's report: report.md (English), report.zh.md (Chinese), report.html / report.zh.html
(self-contained), figures/ and tables/*.csv. The structure is one template (templates/report.md.j2); the words
are per language (messages/<lang>.toml); tables and numbers are the same in every language."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.analyze.costs.naming import kernel_labels
from kernelscope.analyze.hardware import Ceilings
from kernelscope.analyze.paths.critical_path import CriticalPath
from kernelscope.analyze.report_tables import (
    ReportTables,
    projection_and_idle,
    report_kernels,
    report_tables,
    roofline_tables,
)
from kernelscope.analyze.structure.phases import phase_table
from kernelscope.contracts.run import Run
from kernelscope.contracts.summary import Summary
from kernelscope.report import explorer, figure_formats
from kernelscope.report import formatting as fmt
from kernelscope.report.critical_path import path_figure_jobs
from kernelscope.report.energy_section import energy_figure_jobs, run_timeline
from kernelscope.report.figure_jobs import FigureDrawing
from kernelscope.report.html import embed_figures, page_with_figure_links
from kernelscope.report.languages import LANGUAGES
from kernelscope.report.report_context import page_context, report_environment
from kernelscope.report.report_csvs import write_report_csvs
from kernelscope.report.report_figures import (
    figure_files_by_key,
    figure_words_of,
    histogram_jobs,
    measured_jobs,
    phase_histogram_panels,
    points_with_shares,
    roofline_jobs,
)
from kernelscope.report.templating import (
    message_catalog,
    text_template,
)
from kernelscope.report.typesetting import space_cjk

TOP_N = 20
REPORT_FILES = {"en": "report.md", "zh": "report.zh.md"}
HTML_FILES = {"en": "report.html", "zh": "report.zh.html"}


def render_report(
    run: Run, summary: Summary | Callable[[pl.DataFrame], Summary], out_dir: Path, top_n: int = TOP_N,
    ceilings: Ceilings | None = None, languages: tuple[str, ...] = LANGUAGES, html: bool = True,
    meanwhile: Callable[[], object] | None = None, phases: pl.DataFrame | None = None,
    critical: CriticalPath | None = None,
) -> list[Path]:
    """Writes the reports, figures/ and tables/*.csv into out_dir (created). Returns the files written. The
    histograms and roofline charts are drawn by helper processes while the tables are computed, the other figures
    once the tables are ready (figure_jobs). `summary`: the run's, or how to make it from the run's phase table
    (made once the first figures are being drawn). `phases`: phase_table(run.kernels), where the caller has it (the
    summary's; computed here otherwise, once for the summary and the report). `meanwhile`: the caller's own work
    (writing the run's tables), done on a thread of its own once the first figures are being drawn, while the tables
    are computed. `critical`: the run's critical paths (analyze/paths/path_tables), where the caller has them."""
    figure_dir = out_dir / "figures"
    device = run.info.hardware.name or (ceilings.device if ceilings else "")
    figure_words = {lang: figure_words_of(lang) for lang in dict.fromkeys(("en", *languages))}
    # Two threads beside this one: the caller's work, and the run's own projection and idle gaps while the other
    # tables are computed.
    with FigureDrawing() as drawing, ThreadPoolExecutor(max_workers=2) as beside:
        kernels = report_kernels(run, ceilings)
        panels = phase_histogram_panels(kernels, run.info.is_cpu)  # binned once for every language
        histograms = {lang: histogram_jobs(panels, figure_dir, device, run.info.is_cpu, lang, words)
                      for lang, words in figure_words.items()}
        timeline, _ = run_timeline(run)  # the Energy section's figure, one drawing for every language
        power = {lang: energy_figure_jobs(timeline, figure_dir, lang, words) for lang, words in figure_words.items()}
        drawing.submit([job for jobs in (*histograms.values(), *power.values()) for job in jobs])
        # The roofline figures need only their own tables: drawn while the others are computed.
        labels = kernel_labels(kernels)
        roofline = roofline_tables(kernels, labels, ceilings)
        points = points_with_shares(roofline)  # one table per phase for every language: drawn together
        rooflines = {lang: roofline_jobs(points, ceilings, figure_dir, device, lang, words)
                     for lang, words in figure_words.items()}
        drawing.submit([job for jobs in rooflines.values() for job in jobs])
        # The caller's work (Parquet writes, outside the GIL) on a thread beside the tables; done before collecting
        # (leaving the block, also on an error, waits for it: nothing is still writing afterwards).
        callers = beside.submit(meanwhile) if meanwhile is not None else None
        phases = phase_table(kernels) if phases is None else phases
        if not isinstance(summary, Summary):
            summary = summary(phases)
        own = beside.submit(projection_and_idle, run, kernels, labels, ceilings)
        tables = report_tables(run, ceilings, kernels=kernels, labels=labels, roofline=roofline, phases=phases,
                               critical=critical, beside=own.result)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = write_report_csvs(tables, out_dir / "tables")
        measured = {lang: measured_jobs(tables, figure_dir, device, lang, words) + path_figure_jobs(
            tables.critical_path, figure_dir, lang, words) for lang, words in figure_words.items()}
        drawing.submit([job for jobs in measured.values() for job in jobs])
        jobs = {lang: histograms[lang] + power[lang] + rooflines[lang] + measured[lang] for lang in figure_words}
        # The reports are written while the figures are drawn, linking the files each figure is expected to
        # have; a language whose figures came out otherwise (nothing to draw, no font) is written again below.
        expected = figure_files_by_key(drawing.expected(), jobs)
        drafts = {lang: _report_text(run, summary, tables, top_n, lang, expected[lang], html) for lang in languages}
        if callers is not None:
            callers.result()  # its error, if any, raised here
        drawn = drawing.collect()
    figure_paths = figure_files_by_key(drawn, jobs)
    written += sorted({p for by_key in figure_paths.values() for paths in by_key.values() for p in paths})
    for lang in languages:
        text, page = (drafts[lang] if figure_paths[lang] == expected[lang]
                      else _report_text(run, summary, tables, top_n, lang, figure_paths[lang], html))
        path = out_dir / REPORT_FILES[lang]
        path.write_text(text, encoding="utf-8")
        written.append(path)
        if page is not None:
            html_path = out_dir / HTML_FILES[lang]
            html_path.write_text(embed_figures(page, out_dir), encoding="utf-8")
            written.append(html_path)
    return written


def _report_text(run: Run, summary: Summary, tables: ReportTables, top_n: int, lang: str,
                 figures: dict[str, list[Path]], html: bool) -> tuple[str, str | None]:
    """The report's Markdown in `lang` and (with `html`) its page, figures linked, not yet embedded; `figures`:
    each figure's files by the report's key."""
    context = page_context(run, summary, tables, top_n, lang)
    figure_links = {key: fmt.Markdown(f"figures/{paths[0].name}") for key, paths in figures.items() if paths}
    context["figures"] = figure_links
    context["histogram_figures"] = [key for key in figure_links if "histograms" in key]
    context["figures_drawn"] = figure_formats.drawn()  # not with --figure-formats none: the appendix says so
    # Figures of another language drawn in English (no font for its script on this machine): the page says so.
    context["figures_in_english"] = lang != "en" and any(f".{lang}." not in paths[0].name
                                                         for paths in figures.values() if paths)
    text = report_environment(lang, run.info.is_cpu).get_template("report.md.j2").render(**context)
    if lang == "zh":
        text = space_cjk(text)
    if not html:
        return text, None
    return text, page_with_figure_links(text, lang=lang, title=_title(context, lang),
                                        after_headings=_interactive(tables, lang, run.info.is_cpu))


def _interactive(tables: ReportTables, lang: str, cpu_run: bool) -> dict[str, str]:
    """The HTML page's explorer of each phase's layer → module → kernel breakdown (under the breakdown heading)
    and the strip of decode steps (under the steps heading), keyed by those headings' text in `lang`."""
    words = message_catalog("", lang)
    env = report_environment(lang, cpu_run)

    def heading(key: str) -> str:
        text = text_template(env, f"text:{key}", words["text"][key]).render(cpu_run=cpu_run)
        return space_cjk(text) if lang == "zh" else text

    out: dict[str, str] = {}
    icicles = []
    for phase, t in tables.by_phase.items():
        if t.layer_breakdown is None:
            continue
        phase_word = words["terms"].get(phase, phase)
        tree = explorer.breakdown_tree(phase_word, t.layer_breakdown, words["terms"])
        if tree is not None:
            caption = text_template(env, "text:explorer_caption", words["text"]["explorer_caption"]).render(
                phase=phase_word, total=fmt.duration(tree.value), cpu_run=cpu_run)
            icicles.append(explorer.icicle_svg(tree, caption))
    if icicles:
        out[heading("h_breakdown")] = "".join(icicles)
    if tables.every_step is not None:
        caption = text_template(env, "text:steps_strip_caption",
                                words["text"]["steps_strip_caption"]).render(cpu_run=cpu_run)
        strip = explorer.step_strip_svg(tables.every_step, caption)
        if strip:
            out[heading("h_steps")] = strip
    return out


def _title(context: dict[str, Any], lang: str) -> str:
    return text_template(report_environment(lang), "text:title", message_catalog("", lang)["text"]["title"]).render(**context)


