"""`kernelscope compare RUN_A RUN_B …`: a comparison report of run directories, the first as baseline."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from kernelscope.analyze.compare import RunView, compare, prepare
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.report.compare import LANGUAGES, TOP_N, render_comparison

# Setup items that tell runs apart, in the order a default label names them.
LABEL_ITEMS = [("hardware", "name"), ("workload", "model"), ("workload", "backend"), ("workload", "dtype"),
               ("workload", "batch_size"), ("workload", "prompt_len"), ("workload", "new_tokens")]
LABEL_PREFIX = {"batch_size": "b", "prompt_len": "p", "new_tokens": "n"}
# Characters that would make per-run column names (per_step_ns[a], ratio[b/a]) ambiguous.
LABEL_FORBIDDEN = re.compile(r"[\[\]/,|\n]")


def compare_runs(paths: list[Path], labels: list[str] | None, out: Path | None, runs_dir: Path,
                 top_n: int = TOP_N, languages: tuple[str, ...] = LANGUAGES) -> Path:
    if len(paths) < 2:
        raise UserError("compare: give at least two run directories")
    profiles = [rundir.read_run(p) for p in paths]
    summaries = [_summary(p) for p in paths]
    for path, profile in zip(paths, profiles, strict=True):
        if profile.kernels.height == 0:
            raise UserError(f"{path}: the run has no kernels to compare")
    labels = _check_labels(labels, len(paths)) if labels else default_labels(paths, [p.run for p in profiles])
    views: list[RunView] = [prepare(label, profile, summary)
                            for label, profile, summary in zip(labels, profiles, summaries, strict=True)]
    comparison = compare(views)
    runs = [_run_entry(label, path, view) for label, path, view in zip(labels, paths, views, strict=True)]
    target = out or _default_out(runs_dir, labels)
    with rundir.staged_directory(target) as tmp:
        render_comparison(comparison, runs, tmp, top_n=top_n, languages=languages)
    return target.resolve()


def default_labels(paths: list[Path], runs: list[dict[str, Any]]) -> list[str]:
    """Short labels from what tells the runs apart (device, model, batch …); directory names otherwise."""
    parts: list[list[str]] = [[] for _ in runs]
    for section, key in LABEL_ITEMS:
        values = [(run.get(section) or {}).get(key) for run in runs]
        if len({str(v) for v in values}) > 1:
            for part, value in zip(parts, values, strict=True):
                part.append(_short(key, value))
    labels = ["-".join(p) for p in parts]
    if all(labels) and len(set(labels)) == len(labels):
        return labels
    names = [p.resolve().name for p in paths]
    if len(set(names)) == len(names):
        return [LABEL_FORBIDDEN.sub("-", n) for n in names]
    return [f"run{i + 1}" for i in range(len(paths))]


def _short(key: str, value: Any) -> str:
    if value is None:
        return "none"
    text = str(value)
    if key == "name":
        text = re.sub(r"^nvidia\s+", "", text, flags=re.IGNORECASE).split()[0]
    text = LABEL_FORBIDDEN.sub("-", text)
    return f"{LABEL_PREFIX.get(key, '')}{text}".lower()


def _check_labels(labels: list[str], count: int) -> list[str]:
    if len(labels) != count:
        raise UserError(f"--labels: {len(labels)} label(s) for {count} runs")
    if any(not label for label in labels):
        raise UserError("--labels: empty label")
    if len(set(labels)) != len(labels):
        raise UserError(f"--labels: labels must differ, got {','.join(labels)}")
    bad = [label for label in labels if LABEL_FORBIDDEN.search(label)]
    if bad:
        raise UserError(f"--labels: '{bad[0]}' contains one of [ ] / , | (they delimit column names)")
    return labels


def _summary(path: Path) -> dict[str, Any]:
    file = path / rundir.SUMMARY_JSON
    if not file.is_file():
        raise UserError(f"{path}: no {rundir.SUMMARY_JSON} in the run directory")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{file}: invalid JSON ({exc})") from None


def _run_entry(label: str, path: Path, view: RunView) -> dict[str, Any]:
    run = view.profile.run
    workload = run.get("workload") or {}
    return {
        "label": label, "path": str(path), "model": workload.get("model"),
        "device": (run.get("hardware") or {}).get("name"), "dtype": workload.get("dtype"),
        "batch_size": workload.get("batch_size"), "prompt_len": workload.get("prompt_len"),
        "new_tokens": workload.get("new_tokens"), "kernels": view.summary.get("kernel_count"),
    }


def _default_out(runs_dir: Path, labels: list[str]) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9.+-]+", "-", "compare-" + "-vs-".join(labels))[:120].strip("-")
    path = runs_dir / f"{name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = runs_dir / f"{name}-{stamp}-{n}"
    return path
