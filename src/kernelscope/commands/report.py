"""`kernelscope report RUN`: re-render a run's report from its stored tables (no profiling)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelscope.commands.arguments import add_lang_arg, positive_int

HELP = "re-render a run's report from its stored tables"
DESCRIPTION = "Re-render report/ of a run directory from its tables, without profiling again."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="run directory")
    parser.add_argument("--top", type=positive_int, default=20,
                        help="kernels per phase in the top tables (default 20)")
    parser.add_argument("--rank", type=int, metavar="K",
                        help="runs of several ranks: the report of rank K alone, into RUN/report-rankK/")
    add_lang_arg(parser)


def run(args: argparse.Namespace, steps) -> int:
    from kernelscope.contracts.run_files import RUN_JSON

    if (args.run / RUN_JSON).is_file():
        from kernelscope.report.figure_jobs import warm_up_helper

        # The figure helpers' fork server loads matplotlib while this process loads the run's modules and tables:
        # started first thing (its start costs this process a few milliseconds), where a run directory may be.
        warm_up_helper()
    from kernelscope.load.rundir import read_run_info

    read_run_info(args.run)  # a bad run directory fails before any progress display
    from kernelscope.pipeline import rerender

    with steps.step("Rendering the report"):
        written = rerender(args.run, args.top, args.lang, rank=args.rank)
    print(args.run.resolve() if args.rank is None else written.parent.resolve())
    return 0
