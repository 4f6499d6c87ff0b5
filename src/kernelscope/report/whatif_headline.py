"""The head of a what-if study: the run as measured kept apart from what the target's hardware and the design
options each make of it (analyze/projection/whatif.py `headline`), as the summary's first table and as three lines for the
terminal, which also say when the model carries most of a phase at its measured time and so projects little."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kernelscope import inert, ranges
from kernelscope.analyze.projection.whatif import AS_IS, BOTH, HARDWARE, OPTIONS, WhatIf
from kernelscope.report import formatting as fmt
from kernelscope.report.templating import message_catalog

SCENARIOS = (AS_IS, HARDWARE, OPTIONS, BOTH)


def options_text(study: WhatIf) -> str:
    """The design options asked for, in a few words (English; the table's rows word them per language)."""
    parts = (["fused element-wise chains"] if study.options.fuse else []) + (
        [f"{study.options.weight_bits}-bit weights"] if study.options.weight_bits != 16 else [])
    return " and ".join(parts)


def headline_table(study: WhatIf, lang: str) -> str | None:
    """Rows: as is, the target's hardware alone, the options alone, both; columns: per step and speed-up of decode
    and prefill (the phases the run has)."""
    if not study.headline.height:
        return None
    words = message_catalog("whatif", lang)
    h, text = words["headers"], words["text"]
    phases = [p for p in (ranges.DECODE, ranges.PREFILL) if p in study.headline["phase"].to_list()]
    names = {AS_IS: text["scenario_as_is"].format(source=study.source.name),
             HARDWARE: text["scenario_hardware"].format(target=study.target.name),
             OPTIONS: text["scenario_options"].format(source=study.source.name),
             BOTH: text["scenario_both"].format(target=study.target.name)}
    columns = [h["headline_scenario"]]
    for phase in phases:
        columns += [h[f"headline_{phase}"], h[f"headline_{phase}_speedup"]]
    rows = []
    for scenario in SCENARIOS:
        part = study.headline.filter(pl.col("scenario") == scenario)
        if not part.height:
            continue
        row = [fmt.plain(names[scenario])]
        for phase in phases:
            value = part.filter(pl.col("phase") == phase)
            per_step, speedup = (value["per_step_ns"][0], value["speedup"][0]) if value.height else (None, None)
            row += [fmt.duration(per_step), "–" if fmt.missing(speedup) else f"{speedup:.2f}×"]
        rows.append(row)
    return fmt.markdown_table([fmt.plain(c) for c in columns], [False] + [True] * (len(columns) - 1), rows)


def headline_lines(study: WhatIf, out_dir: Path, languages: tuple[str, ...], carried_limit: float) -> list[str]:
    """Three lines: what was projected onto what, each scenario's decode (else prefill) per step, and where the
    study is; a line before them where the model carries more than `carried_limit` % of a phase."""
    phase = ranges.DECODE if ranges.DECODE in study.headline["phase"].to_list() else ranges.PREFILL
    asked = options_text(study)
    lines = []
    for row in study.calibration.filter(pl.col("phase") != ranges.UNKNOWN).iter_rows(named=True):
        if row["carried_pct"] is not None and row["carried_pct"] > carried_limit:
            lines.append(f"note: the model carries {row['carried_pct']:.1f}% of {row['phase']}'s device time at its "
                         "measured duration (kernels without a cost model): its projection there says little")
    shown = {AS_IS: "as is", HARDWARE: f"on {study.target.name}", OPTIONS: f"with {asked}", BOTH: "both"}
    cells = []
    for row in study.headline.filter(pl.col("phase") == phase).iter_rows(named=True):
        speed = "" if row["scenario"] == AS_IS else f" ({row['speedup']:.2f}×)"
        cells.append(f"{shown[row['scenario']]} {fmt.duration(row['per_step_ns'])}{speed}")
    name = "whatif.html" if "en" in languages else "whatif.zh.html"
    lines += [f"kernelscope whatif: measured on {study.source.name}, projected onto {study.target.name}"
              + (f" with {asked}" if asked else ""),
              f"{phase} per step: " + ("; ".join(cells) if cells else "–"),
              f"report: {out_dir / name} (and whatif.json beside it)"]
    return [inert.terminal(line) for line in lines]
