"""A speed-up study's files (`kernelscope whatif RUN --speedup …`, docs/whatif.md): speedup.json, tables/*.csv with
every step re-timed and the new critical path, and the lines the command prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope import inert
from kernelscope.analyze.paths.path_walk import CLASSES
from kernelscope.analyze.paths.speedup import SpeedupStudy
from kernelscope.report import formatting as fmt
from kernelscope.report.templating import write_csv_tables

STUDY_FILE = "speedup.json"  # in every speed-up study folder: what marks it as one kernelscope may replace


def study_record(study: SpeedupStudy, run_dir: Path) -> dict[str, Any]:
    """speedup.json: the speedups (and how many device nodes each named), per phase the measured and re-timed
    step time and the share of each class of the new path, per step the same."""
    path_steps = study.path.steps
    shares = {}
    for (phase,), rows in path_steps.group_by("phase", maintain_order=True):
        total = rows["path_ns"].sum() or 1
        shares[str(phase)] = {c: int(rows[f"{c}_ns"].sum()) / total for c in CLASSES}
    return {
        "run": str(run_dir),
        "speedups": [{"target": s.target, "factor": s.factor, "device_nodes": study.matched.get(s.target)}
                     for s in study.speedups],
        "phases": [{**row, "new_path_shares": shares.get(row["phase"], {})}
                   for row in study.phases.iter_rows(named=True)],
        "steps": study.steps.to_dicts(),
    }


def write_study(study: SpeedupStudy, run_dir: Path, directory: Path) -> list[Path]:
    """speedup.json and tables/ (speedup_steps, speedup_phases, critical_path_<phase> of the new path) into
    `directory` (a staging directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / STUDY_FILE
    record.write_text(json.dumps(study_record(study, run_dir), indent=2, default=str) + "\n", encoding="utf-8")
    frames: dict[str, pl.DataFrame] = {"speedup_steps": study.steps, "speedup_phases": study.phases}
    for phase in study.phases["phase"].to_list():
        frames[f"critical_path_{phase}"] = study.path.segments.filter(pl.col("phase") == phase)
    return [record, *write_csv_tables(frames, directory / "tables")]


def study_lines(study: SpeedupStudy) -> list[str]:
    """What the command prints: the speedups, then per phase its steps, the measured and re-timed mean step, the
    saving, what adding up the targets' device time would have said, and the new path's largest class."""
    named = ", ".join(f"{inert.terminal(s.target)} ÷ {s.factor:g}" + (
        f" ({study.matched[s.target]:,} launches)" if study.matched.get(s.target, -1) >= 0 else " (class)")
        for s in study.speedups)
    lines = [f"re-timed with {named}"]
    path = study.path.steps
    for row in study.phases.iter_rows(named=True):
        steps = row["steps"] or 1
        mine = path.filter(pl.col("phase") == row["phase"])
        total = mine["path_ns"].sum() or 1
        top = max(CLASSES, key=lambda c: mine[f"{c}_ns"].sum())
        lines.append(
            f"  {inert.terminal(str(row['phase']))}: {row['steps']} step(s), "
            f"{fmt.duration(row['step_ns'] / steps)} → {fmt.duration(row['new_step_ns'] / steps)} per step "
            f"({_signed(row['saved_pct'])} of the step; the targets' device time alone: "
            f"{_signed(row['sum_saved_pct'])}); new path: {100 * mine[f'{top}_ns'].sum() / total:.1f}% {top}")
    return lines


def _signed(pct: float | None) -> str:
    if pct is None:
        return "–"
    return f"{-pct:+.2f}%" if pct else "0.00%"
