"""Render a comparison of runs: compare.md / compare.zh.md, self-contained compare.html / compare.zh.html,
figures/ and tables/*.csv, and compare.json (key figures for scripts). Structure in templates/compare.md.j2,
words in messages/compare.<lang>.toml; the numbers are the comparison's, the same in every language."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
from jinja2 import Environment

from kernelscope import inert
from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.comparison.compare import ComparedRun, Comparison
from kernelscope.analyze.comparison.compare_verdicts import noise_known_col, threshold_col, verdict_col
from kernelscope.analyze.comparison.run_views import col, delta_col, ratio_col
from kernelscope.report import figure_formats
from kernelscope.report import formatting as fmt
from kernelscope.report.html import markdown_to_html
from kernelscope.report.languages import LANGUAGES
from kernelscope.report.templating import (
    message_catalog,
    template_environment,
    text_template,
    write_csv_tables,
)

MARKDOWN_FILES = {"en": "compare.md", "zh": "compare.zh.md"}
HTML_FILES = {"en": "compare.html", "zh": "compare.zh.html"}
TOP_N = 20

Cell = Callable[[dict[str, Any]], str]


def ratio(value: float | None) -> str:
    return "–" if fmt.missing(value) else f"{value:.2f}×"


def signed_duration(ns: float | None) -> fmt.Markdown:
    """A change of time with its sign: our own text, printed as it is (a sentence showed `\\+` escaped as data)."""
    if ns is None:
        return fmt.Markdown("–")
    return fmt.Markdown(("+" if ns > 0 else "−" if ns < 0 else "±") + fmt.duration(abs(ns)))


def render_comparison(comparison: Comparison, runs: list[ComparedRun], out_dir: Path, top_n: int = TOP_N,
                      languages: tuple[str, ...] = LANGUAGES) -> list[Path]:
    """Writes everything into out_dir (created). `runs`: per run its label and path. Returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = _write_csvs(comparison, out_dir / "tables")
    figure_links: dict[str, str] = {}
    charted = comparison.compared_phases if figure_formats.drawn() else []  # none with --figure-formats none
    if charted:
        from kernelscope.report import figures  # matplotlib: loaded only where a figure is drawn
    for phase in charted:
        paths = figures.compare_bars(comparison.categories.filter(pl.col("phase") == phase), comparison.labels,
                                     "category", f"Device time per step by category: {phase}",
                                     out_dir / "figures", f"compare_{phase}")
        if paths:
            figure_links[phase] = fmt.Markdown(f"figures/{paths[0].name}")
            written += paths
    key_figures = _key_figures(comparison, runs)
    (out_dir / "compare.json").write_text(json.dumps(key_figures, indent=2) + "\n", encoding="utf-8")
    written.append(out_dir / "compare.json")
    for lang in languages:
        context = _context(comparison, runs, top_n, lang)
        context["figures"] = figure_links
        env = _env(lang)
        text = env.get_template("compare.md.j2").render(**context)
        path = out_dir / MARKDOWN_FILES[lang]
        path.write_text(text, encoding="utf-8")
        title = text_template(env, "text:title", message_catalog("compare", lang)["text"]["title"]).render(**context)
        (out_dir / HTML_FILES[lang]).write_text(markdown_to_html(text, out_dir, lang=lang, title=title),
                                                encoding="utf-8")
        written += [path, out_dir / HTML_FILES[lang]]
    return written


def signed_percent(value: float | None) -> fmt.Markdown:
    """A relative change in percent with its sign (+12.3%, −4.0%): our own text, printed as it is."""
    if value is None:
        return fmt.Markdown("–")
    return fmt.Markdown(("+" if value > 0 else "−" if value < 0 else "±") + f"{abs(value):.1f}%")


def _env(lang: str) -> Environment:
    words = message_catalog("compare", lang)
    return template_environment(words, dict(duration=fmt.duration, ratio=ratio, delta=signed_duration,
                                            change=signed_percent,
                                            percent=fmt.percent, code=fmt.code, number=fmt.number,
                                            term=lambda v: words["terms"].get(v, v)),
                                cache_namespace=f"compare-{lang}")


@dataclass(frozen=True)
class _Words:
    """A comparison page's words in one language, and the cell formatter of translated terms."""

    words: dict[str, Any]

    @property
    def h(self) -> dict[str, str]:
        return self.words["headers"]

    def term(self, value: Any) -> str:
        terms = self.words["terms"]
        return fmt.plain(terms.get(value, value) if isinstance(value, str) else value)


def _context(c: Comparison, runs: list[ComparedRun], top_n: int, lang: str) -> dict[str, Any]:
    w = _Words(message_catalog("compare", lang))
    per_phase = {phase: _phase_context(c, phase, w, top_n) for phase in c.compared_phases}
    rule = metrics.rule()
    return {
        "differences": differences_text(c, w), "noisy": c.noisy, "noisy_limit": rule["noisy_cv_pct"],
        "floor_pct": rule["floor_pct"], "sigmas": f"{rule['sigmas']:g}", "cpu_run": c.cpu_runs,
        "labels": c.labels, "base": c.baseline, "others": c.labels[1:], "runs": runs, "lang": lang,
        # Attribute access in the messages (n.models): a namespace, so no value is shadowed by a dict method.
        "notes": [SimpleNamespace(key=n.key, **n.values) for n in c.notes],
        "setup": _setup_table(c, w), "timings": _timings_table(c, w), "phases": _phases_table(c, w),
        "per_phase": per_phase, "col": col, "ratio_col": ratio_col, "delta_col": delta_col, "top_n": top_n,
    }


def _phase_context(c: Comparison, phase: str, w: _Words, top_n: int) -> dict[str, Any]:
    h, term, labels, base = w.h, w.term, c.labels, c.baseline
    matched = c.matched.filter(pl.col("phase") == phase)
    layers = c.layers.filter(pl.col("phase") == phase)
    changes = c.changes.filter(pl.col("phase") == phase)
    return {
        "changes": _table(changes, [
            (h["run"], lambda r: fmt.plain(r["run"])),
            (h["module"], lambda r: fmt.code(r["match_module"])),
            (h["work"], lambda r: term(r["group"])),
            (h["kernels"], lambda r: _pair(base, r["kernels_base"], r["run"], r["kernels_run"])),
            (f'{h["per_step"]} ({base})', lambda r: fmt.duration(r["base_ns"])),
            (h["per_step_run"], lambda r: fmt.duration(r["run_ns"])),
            (h["delta"], lambda r: signed_duration(r["delta_ns"])),
            (h["ratio"], lambda r: ratio(r["ratio"])),
            (h["share_of_change"], lambda r: fmt.percent(r["share_of_change_pct"])),
        ], numeric_from=4) if changes.height else None,
        "matched": _table(matched.head(top_n), [
            (h["module"], lambda r: fmt.code(r["match_module"])),
            (h["work"], lambda r: term(r["group"])),
            (h["kernels"], _merged(labels, "kernels")),
            (h["ops"], _merged(labels, "ops", code=True)),
            *_per_run(labels, h["per_step"], "per_step_ns", fmt.duration),
            *_per_run(labels, h["launches_per_step"], "launches_per_step", lambda v: fmt.number(v, 1)),
            *_ratios(labels, h["ratio_of"]),
        ], numeric_from=4),
        "matched_shown": min(top_n, matched.height),
        "matched_total": matched.height,
        "layers": _table(layers, [
            (h["layer_type"], lambda r: term(r["layer_type"])),
            (h["module"], lambda r: fmt.code(r["layer_module"])),
            (h["work"], lambda r: term(r["group"])),
            (h["kernels"], _merged(labels, "kernels")),
            *_per_run(labels, h["per_layer_step"], "per_layer_step_ns", fmt.duration),
            *_per_run(labels, h["launches_per_layer_step"], "launches_per_layer_step", lambda v: fmt.number(v, 1)),
            *_ratios(labels, h["ratio_of"]),
        ], numeric_from=4) if layers.height else None,
        "categories": _mix(c.categories.filter(pl.col("phase") == phase), "category", labels, h, term),
        "libraries": _mix(c.libraries.filter(pl.col("phase") == phase), "library", labels, h, term),
        "row": (row := c.phases.filter(pl.col("phase") == phase).row(0, named=True)),
        "verdicts": {label: row_verdict(row, label, base) for label in labels[1:]},
    }


def row_verdict(row: dict[str, Any], label: str, base: str) -> SimpleNamespace | None:
    """A table row's verdict on `label` against the baseline (the columns analyze/comparison/compare wrote), or None."""
    direction = row.get(verdict_col(label, base))
    if direction is None:
        return None
    change = (row.get(ratio_col(label, base)) or 1.0) - 1.0
    threshold = row[threshold_col(label, base)] / 100.0
    known = bool(row[noise_known_col(label, base)])
    basis = "floor only" if not known else "noise" if threshold > metrics.floor() else "floor"
    return SimpleNamespace(direction=direction, threshold=threshold, noise_known=known, change=change, basis=basis)


def differences_text(c: Comparison, w: _Words) -> str | None:
    """What makes the runs not like for like, as `item (label: value, …)` joined: plain text (escaped when
    printed), or None when they are alike."""
    if not c.differences:
        return None
    return "; ".join(f"{w.words['items'].get(d.item, d.item).lower()} ("
                     + ", ".join(f"{label}: {value}" for label, value in zip(c.labels, d.values, strict=False)) + ")"
                     for d in c.differences)


def _phases_table(c: Comparison, w: _Words) -> str:
    h, labels = w.h, c.labels
    return _table(c.phases, [
        (h["phase"], lambda r: w.term(r["phase"])),
        *_per_run(labels, h["device_time"], "device_time_ns", fmt.duration),
        *_per_run(labels, h["steps"], "steps", fmt.number),
        *_per_run(labels, h["per_step"], "device_time_per_step_ns", fmt.duration),
        *_per_run(labels, h["kernels_per_step"], "kernels_per_step", lambda v: fmt.number(v, 1)),
        *_per_run(labels, h["cpu_busy" if c.cpu_runs else "busy"], "busy_pct", fmt.percent),
        *_per_run(labels, h["median_launch_call"], "median_launch_ns", fmt.duration),
        *_ratios(labels, h["ratio_of"]),
    ], numeric_from=1)


TIMING_FORMAT: dict[str, Cell] = {
    "ttft_ms": lambda v: fmt.ms(v, 2), "tpot_ms": lambda v: fmt.ms(v, 2), "e2e_ms": lambda v: fmt.ms(v, 1),
    "device_time_ms": lambda v: fmt.ms(v, 3), "tokens_per_s": lambda v: fmt.number(v, 1),
    "decode_tokens_per_s": lambda v: fmt.number(v, 1), "kernel_count": fmt.number,
    "attribution_coverage": lambda v: fmt.ratio_percent(v, 1),
}


def _timings_table(c: Comparison, w: _Words) -> str:
    return _table(c.timings, [
        (w.h["metric"], lambda r: fmt.plain(w.words["metrics"].get(r["metric"], r["metric"]))),
        *((label, (lambda r, label=label: TIMING_FORMAT[r["metric"]](r[col("value", label)]))) for label in c.labels),
        *_ratios(c.labels, w.h["ratio_of"]),
        *((w.h["change_of"].format(run=label, base=c.baseline),
           (lambda r, label=label: verdict(w, row_verdict(r, label, c.baseline)))) for label in c.labels[1:]),
    ], numeric_from=1)


def verdict(w: _Words, v: SimpleNamespace | None) -> str:
    """The verdict on a change (analyze/comparison/metrics.py): its direction and the threshold it was held to, or –."""
    return "–" if v is None else fmt.plain(verdict_words(w, v))


def verdict_words(w: _Words, v: SimpleNamespace) -> str:
    terms = w.words["terms"]
    floor = "" if v.basis == "noise" else f", {terms['floor']}"
    return f"{terms.get(v.direction, v.direction)} (±{100 * v.threshold:.1f}%{floor})"


def _setup_table(c: Comparison, w: _Words) -> str:
    return _table(c.setup, [
        (w.h["item"], lambda r: fmt.plain(w.words["items"].get(r["item"], r["item"]))),
        *((label, (lambda r, label=label: _setup_value(r["item"], r[col("value", label)]))) for label in c.labels),
        (w.h["differs"], lambda r: w.words["terms"]["yes"] if r["differs"] else ""),
    ], numeric_from=None)


def _setup_value(item: str, value: str | None) -> str:
    """Sizes read better with separators and units; everything else as recorded."""
    if value is not None and item in ("parameters", "memory_bytes") and value.isdigit():
        return fmt.gigabytes(float(value)) if item == "memory_bytes" else fmt.number(int(value))
    return fmt.plain(value)


def _per_run(labels: list[str], header: str, metric: str, format_value: Callable[[Any], str]) -> list[tuple[str, Cell]]:
    return [(f"{header} ({label})", (lambda r, label=label: format_value(r[col(metric, label)]))) for label in labels]


def _ratios(labels: list[str], header: str) -> list[tuple[str, Cell]]:
    base = labels[0]
    return [(header.format(run=label, base=base), (lambda r, label=label: ratio(r.get(ratio_col(label, base)))))
            for label in labels[1:]]


def _merged(labels: list[str], metric: str, code: bool = False) -> Cell:
    """One cell for all runs when they agree; otherwise each run's value after its label."""
    def cell(row: dict[str, Any]) -> str:
        values = [row.get(col(metric, label)) for label in labels]
        present = {v for v in values if v}
        show = fmt.code if code else fmt.plain
        if len(present) <= 1 and all(values):
            return show(values[0])
        by_value: dict[str | None, list[str]] = {}
        for label, value in zip(labels, values, strict=True):
            by_value.setdefault(value or None, []).append(label)
        return "; ".join(f"{fmt.plain(', '.join(names))}: {show(value) if value else '–'}"
                         for value, names in by_value.items())
    return cell


def _pair(base: str, base_value: str | None, run: str, run_value: str | None) -> str:
    """The baseline's and a run's kernels: once when they are the same."""
    if base_value == run_value:
        return fmt.plain(base_value)
    return f"{fmt.plain(base)}: {fmt.plain(base_value)}; {fmt.plain(run)}: {fmt.plain(run_value)}"


def _mix(df: pl.DataFrame, column: str, labels: list[str], h: dict[str, str], term: Callable[[Any], str]) -> str | None:
    if not df.height:
        return None
    return _table(df, [
        (h[column], lambda r: term(r[column])),
        *_per_run(labels, h["per_step"], "per_step_ns", fmt.duration),
        *_per_run(labels, h["share"], "time_pct", fmt.percent),
        *_ratios(labels, h["ratio_of"]),
    ], numeric_from=1)


def _table(df: pl.DataFrame, columns: list[tuple[str, Cell]], numeric_from: int | None) -> str:
    """A GitHub Markdown table; columns from `numeric_from` on are right-aligned."""
    right = [numeric_from is not None and i >= numeric_from for i in range(len(columns))]
    rows = ([cell(row) for _, cell in columns] for row in df.iter_rows(named=True))
    return fmt.markdown_table([fmt.plain(title) for title, _ in columns], right, rows)


def _write_csvs(c: Comparison, directory: Path) -> list[Path]:
    frames = {"setup": c.setup, "timings": c.timings, "phases": c.phases, "layers": c.layers, "matched": c.matched,
              "categories": c.categories, "libraries": c.libraries, "changes": c.changes,
              "notes": pl.DataFrame({"note": [n.key for n in c.notes],
                                     "values": [json.dumps(n.values, ensure_ascii=False) for n in c.notes]},
                                    schema={"note": pl.String, "values": pl.String})}
    return write_csv_tables(frames, directory)


def _key_figures(c: Comparison, runs: list[ComparedRun]) -> dict[str, Any]:
    """compare.json: the runs, per phase the device time per step of each and its ratio to the baseline."""
    phases = {}
    for row in c.phases.iter_rows(named=True):
        phases[row["phase"]] = {
            "device_time_per_step_us": {label: _us(row[col("device_time_per_step_ns", label)]) for label in c.labels},
            "ratio": {label: row[ratio_col(label, c.baseline)] for label in c.labels[1:]},
            "steps": {label: row[col("steps", label)] for label in c.labels},
            "verdict": _verdicts_of(row, c),
        }
    return {
        "baseline": c.baseline,
        "runs": [dataclasses.asdict(r) for r in runs],
        # What makes the runs not like for like (empty: alike), and the runs whose repeats are noisy.
        "differences": [{"item": d.item, "values": dict(zip(c.labels, map(_plain_value, d.values), strict=False))}
                        for d in c.differences],
        "noisy": c.noisy,
        "phases": phases,
        "timings": {row["metric"]: {label: row[col("value", label)] for label in c.labels}
                    for row in c.timings.iter_rows(named=True)},
        "timing_verdicts": {row["metric"]: _verdicts_of(row, c) for row in c.timings.iter_rows(named=True)
                            if any(row.get(verdict_col(label, c.baseline)) for label in c.labels[1:])},
        "notes": [n.key for n in c.notes],
        "changes": c.changes.to_dicts(),
    }


def _verdicts_of(row: dict[str, Any], c: Comparison) -> dict[str, Any]:
    """Per compared run: the verdict's direction, threshold (%) and whether the runs' noise set it."""
    out = {}
    for label in c.labels[1:]:
        v = row_verdict(row, label, c.baseline)
        out[label] = None if v is None else {"verdict": v.direction, "threshold_pct": 100 * v.threshold,
                                             "basis": v.basis}
    return out


def _plain_value(value: Any) -> Any:
    return value if isinstance(value, int | float | str) or value is None else str(value)


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e3


def headline_lines(c: Comparison, out_dir: Path, languages: tuple[str, ...]) -> list[str]:
    """Three lines for the terminal: what was compared and whether it is like for like (and noisy), the verdict
    on each compared phase's mean time per step, and where the comparison was written (plain text, English)."""
    w = _Words(message_catalog("compare", "en"))
    others = ", ".join(c.labels[1:])
    alike = ("not like for like: " + (differences_text(c, w) or "") if c.differences else "like for like")
    noisy = f"; noisy: {', '.join(c.noisy)}" if c.noisy else ""
    phases = []
    for phase in c.compared_phases:
        row = c.phases.filter(pl.col("phase") == phase).row(0, named=True)
        for label in c.labels[1:]:
            v = row_verdict(row, label, c.baseline)
            r = row.get(ratio_col(label, c.baseline))
            if v is not None and r is not None:
                who = f"{label} " if len(c.labels) > 2 else ""
                phases.append(f"{phase} {who}{r:.2f}×, {verdict_words(w, v)}")
    name = MARKDOWN_FILES["en" if "en" in languages else languages[0]]
    return [inert.terminal(f"kernelscope compare: {others} vs {c.baseline} (baseline) — {alike}{noisy}"),
            inert.terminal("mean time per step: " + ("; ".join(phases) if phases else "no phase in common")),
            f"report: {out_dir / HTML_FILES['en' if 'en' in languages else languages[0]]} (and {name} beside it)"]
