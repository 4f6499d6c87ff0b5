"""`kernelscope check RUN --baseline RUN_OR_QUERY`: a regression gate for CI. Exit 1 when the run is slower than
its baseline beyond the runs' noise (or --max-slowdown), 0 otherwise, 2 on bad input; the verdict is printed and
written as Markdown for a pull-request comment (docs/dataset.md states the rule)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from kernelscope.errors import UserError

HELP = "regression gate for CI: fail when a run is slower than its baseline beyond the noise"
DESCRIPTION = (
    "Compare a run's device time per step (per phase), TPOT, TTFT and top kernels with a baseline: a run "
    "directory, a folder of runs, or a SQL query over --baseline-from locations that selects runs (a run_dir "
    "or run_id column). Thresholds come from the runs' noise (step-to-step spread, repeat spread) with a floor; "
    "--max-slowdown 5% sets one for every figure. Runs of another "
    "model, device, dtype, batch size or prompt length are refused unless --allow-incomparable. Prints what "
    "regressed and why (kernels, layers), writes the Markdown summary to --summary, and exits 1 on regression, 0 "
    "otherwise."
)
DEFAULT_SUMMARY = Path("kernelscope-check.md")
_SQL = re.compile(r"^\s*(select|with|from|\()", re.IGNORECASE)


def max_slowdown(text: str) -> float:
    """`5%` or `5` (percent) → 0.05."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%?\s*", text)
    value = float(match.group(1)) / 100 if match else -1.0
    if not 0 < value <= 10:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5% (above 0, at most 1000%), got '{text}'")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="the run directory to check")
    parser.add_argument("--baseline", required=True, metavar="RUN_OR_QUERY",
                        help="a run directory, a folder of runs (their median), or a SQL query selecting runs "
                             "from --baseline-from (e.g. \"select run_dir from runs where commit = 'abc123'\")")
    parser.add_argument("--baseline-from", action="append", metavar="RUNS",
                        help="where a --baseline query looks: run directories, folders, globs, remote locations; "
                             "repeatable (default: the folder that holds RUN)")
    parser.add_argument("--max-slowdown", type=max_slowdown, metavar="PCT",
                        help="the slowdown every figure may show (e.g. 5%%), instead of the noise-aware thresholds")
    parser.add_argument("--allow-incomparable", action="store_true",
                        help="check runs that differ in model, device, dtype, batch size or prompt length anyway "
                             "(their difference is then said first); refused otherwise")
    parser.add_argument("--summary", type=Path, default=DEFAULT_SUMMARY, metavar="FILE",
                        help=f"Markdown summary to write (default ./{DEFAULT_SUMMARY}; replaced if there)")


def run(args: argparse.Namespace, steps) -> int:
    from kernelscope.analyze.comparison.regression import check, combine, figures
    from kernelscope.load.rundir import read_run
    from kernelscope.load.staging import new_file
    from kernelscope.report.check import render_verdict

    candidate = read_run(args.run, ops=False)
    baseline_dirs, baseline_label = _baseline_dirs(args)
    candidate_dir = args.run.resolve()
    baseline_dirs = [d for d in baseline_dirs if d.resolve() != candidate_dir] or baseline_dirs
    baseline_runs = [read_run(d, ops=False) for d in baseline_dirs]
    differences = _differences(baseline_runs, candidate, baseline_dirs, args)
    baselines = [figures(d.name, run) for d, run in zip(baseline_dirs, baseline_runs, strict=True)]
    verdict = check(combine(baseline_label, baselines), figures(args.run.name, candidate), args.max_slowdown)
    text = render_verdict(verdict, str(args.run), baseline_label, differences)
    print(text, end="")
    with new_file(args.summary, replace=True) as tmp:
        tmp.write_text(text, encoding="utf-8")
    if not getattr(args, "quiet", False):
        print(headline(verdict, args.summary))
    return 1 if verdict.regressed else 0


def _differences(baselines: list, candidate, dirs: list[Path], args: argparse.Namespace) -> list[str]:
    """What makes the candidate not like for like with a baseline run (analyze/comparison/metrics.differences), as text; a
    UserError unless --allow-incomparable."""
    from kernelscope.analyze.comparison.metrics import differences

    found: dict[str, list[str]] = {}
    for directory, run in zip(dirs, baselines, strict=True):
        for d in differences([run.info, candidate.info]):
            found.setdefault(d.item.replace("_", " "), []).append(f"{d.values[0]} in {directory.name}")
    said = [f"{item} {', '.join(dict.fromkeys(values))} vs {_value(candidate.info, item)} in the candidate"
            for item, values in found.items()]
    if said and not args.allow_incomparable:
        raise UserError(f"check {args.run}: not comparable with its baseline ({'; '.join(said)}); pass "
                        f"--allow-incomparable to check it anyway")
    return said


def _value(info, item: str) -> object:
    from kernelscope.analyze.comparison.metrics import setup_of

    return setup_of(info)[item.replace(" ", "_")]


def headline(verdict, summary: Path) -> str:
    """Three lines for the terminal after the summary: the verdict, the figure that moved most, where the
    summary went."""
    worst = max(verdict.checks, key=lambda c: c.change - c.threshold, default=None)
    counts = (f"{sum(c.regressed for c in verdict.checks)} of {len(verdict.checks)} figures regressed"
              if verdict.checks else "nothing to compare")
    moved = (f"largest: {worst.phase + ' ' if worst.phase and worst.subject is None else ''}"
             f"{worst.metric if worst.subject is None else 'kernel ' + worst.subject[:60]} {worst.change:+.1%} "
             f"(threshold {worst.threshold:.1%})" if worst is not None else "largest: –")
    return "\n".join([f"kernelscope check: {'REGRESSION' if verdict.regressed else 'pass'} — {counts}", moved,
                      f"summary: {summary.resolve()}"])


def _baseline_dirs(args: argparse.Namespace) -> tuple[list[Path], str]:
    """The baseline's run directories and how the summary names them."""
    from kernelscope.load.dataset import fetch_rows, open_dataset
    from kernelscope.load.run_catalog import find_runs

    text = args.baseline
    if not text.strip():
        raise UserError("--baseline: empty (give a run directory, a folder of runs, or a SQL query)")
    if not _SQL.match(text):
        if not Path(text).exists():
            raise UserError(f"--baseline {text}: no such run directory (nor a SQL query: those start with SELECT "
                            f"or WITH)")
        runs = find_runs([text])
        return [Path(r.directory) for r in runs], text if len(runs) == 1 else f"{text} ({len(runs)} runs)"
    locations = args.baseline_from or [str(args.run.resolve().parent)]
    dataset = open_dataset(locations)
    relation = dataset.query(text)
    column = next((c for c in ("run_dir", "run_id") if c in relation.columns), None)
    if column is None:
        raise UserError("--baseline query: select a run_dir or run_id column (e.g. select run_dir from runs where …)")
    values = {str(row[0]) for row in fetch_rows(relation.select(column))}
    dirs = [Path(r.directory) for r in dataset.runs if (r.directory if column == "run_dir" else r.run_id) in values]
    if any("://" in str(d) for d in dirs):
        raise UserError("--baseline query: check reads baseline runs from local directories only")
    if not dirs:
        raise UserError("--baseline query: selects no runs")
    return dirs, f"{len(dirs)} run{'s' if len(dirs) > 1 else ''} selected by the query"
