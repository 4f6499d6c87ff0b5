"""`kernelscope compare RUN_A RUN_B …`: a comparison report of run directories, the first as baseline."""

from __future__ import annotations

import argparse
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelscope.commands.arguments import add_lang_arg, positive_int
from kernelscope.errors import UserError

if TYPE_CHECKING:
    from kernelscope.analyze.comparison.compare import Comparison
    from kernelscope.contracts.run_info import RunInfo

HELP = "compare runs side by side: GPUs, configurations, engines, before / after"
DESCRIPTION = (
    "Compare run directories side by side (the first is the baseline): setup, timings, device time per "
    "phase, layer → module → kernel per layer per step, kernel mix, and kernels matched across runs by the "
    "job they do (module within the layer + kind of work), with ratios, changes and what changed most. "
    "Writes compare.md / compare.zh.md, HTML pages, figures/, tables/*.csv and compare.json."
)
TOP_N = 20

# Setup items that tell runs apart, in the order a default label names them.
LABEL_ITEMS = ["device", "model", "backend", "dtype", "batch_size", "prompt_len", "new_tokens"]
LABEL_PREFIX = {"batch_size": "b", "prompt_len": "p", "new_tokens": "n"}
# Characters that would make per-run column names (per_step_ns[a], ratio[b/a]) ambiguous.
LABEL_FORBIDDEN = re.compile(r"[\[\]/,|\n]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories (at least two)")
    parser.add_argument("--labels", type=_labels, help="comma-separated names of the runs in the report "
                        "(default: what tells them apart, e.g. h100,h200 or b1,b8)")
    parser.add_argument("--out", type=Path, help="directory to create (default: RUNS_DIR/compare-<labels>-<time>)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"),
                        help="where the comparison goes (default ./runs)")
    parser.add_argument("--top", type=positive_int, default=TOP_N,
                        help=f"matched kernel rows per phase (default {TOP_N})")
    add_lang_arg(parser)


def run(args: argparse.Namespace, steps) -> int:
    if len(args.runs) < 2:
        raise UserError("compare: give at least two run directories")
    with steps.step(f"Comparing {len(args.runs)} runs"):
        path, comparison = compare_runs(args.runs, args.labels, args.out, args.runs_dir, top_n=args.top,
                                        languages=args.lang)
    if not getattr(args, "quiet", False):
        from kernelscope.report.compare import headline_lines

        print("\n".join(headline_lines(comparison, Path(path), args.lang)))
    print(Path(path).resolve())
    return 0


def compare_runs(paths: list[Path], labels: list[str] | None, out: Path | None, runs_dir: Path,
                 top_n: int = TOP_N, languages: tuple[str, ...] = ("en", "zh")) -> tuple[Path, Comparison]:
    from kernelscope.analyze.comparison.compare import ComparedRun, compare, prepare
    from kernelscope.load import rundir, staging
    from kernelscope.report.compare import render_comparison

    if len(paths) < 2:
        raise UserError("compare: give at least two run directories")
    runs = [rundir.read_run(p, ops=False) for p in paths]
    summaries = [rundir.read_summary(p) for p in paths]
    for path, run in zip(paths, runs, strict=True):
        if run.kernels.height == 0:
            raise UserError(f"{path}: the run has no kernels to compare")
    labels = _check_labels(labels, len(paths)) if labels else default_labels(paths, [r.info for r in runs])
    views = [prepare(label, run, summary) for label, run, summary in zip(labels, runs, summaries, strict=True)]
    comparison = compare(views)
    entries = [ComparedRun.of(view, str(path)) for path, view in zip(paths, views, strict=True)]
    target = out or _default_out(runs_dir, labels)
    with staging.staged_directory(target) as tmp:
        render_comparison(comparison, entries, tmp, top_n=top_n, languages=languages)
    return target.resolve(), comparison


def _setup_value(info: RunInfo, item: str) -> Any:
    if item == "device":
        return info.hardware.name
    return getattr(info.workload, item) if info.workload is not None else None


def default_labels(paths: list[Path], infos: list[RunInfo]) -> list[str]:
    """Short labels from what tells the runs apart (device, model, batch …); directory names otherwise."""
    parts: list[list[str]] = [[] for _ in infos]
    for item in LABEL_ITEMS:
        values = [_setup_value(info, item) for info in infos]
        if len({str(v) for v in values}) > 1:
            for part, value in zip(parts, values, strict=True):
                part.append(_short(item, value))
    labels = ["-".join(p) for p in parts]
    if all(labels) and len(set(labels)) == len(labels):
        return labels
    names = [p.resolve().name for p in paths]
    if len(set(names)) == len(names):
        return [LABEL_FORBIDDEN.sub("-", n) for n in names]
    return [f"run{i + 1}" for i in range(len(paths))]


def _short(item: str, value: Any) -> str:
    if value is None:
        return "none"
    text = str(value)
    if item == "device":
        text = re.sub(r"^nvidia\s+", "", text, flags=re.IGNORECASE).split()[0]
    text = LABEL_FORBIDDEN.sub("-", text)
    return f"{LABEL_PREFIX.get(item, '')}{text}".lower()


def _labels(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


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


def _default_out(runs_dir: Path, labels: list[str]) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9.+-]+", "-", "compare-" + "-vs-".join(labels))[:120].strip("-")
    path = runs_dir / f"{name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = runs_dir / f"{name}-{stamp}-{n}"
    return path
