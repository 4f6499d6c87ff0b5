"""Command-line interface: one sub-command per module of kernelscope.commands (each declares its own arguments
and runs itself); errors the user can fix end as one line and exit code 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from kernelscope import __version__
from kernelscope.errors import UserError

# Verb → the module that implements it (add_arguments(parser), run(args, steps) -> int, HELP, DESCRIPTION).
VERBS = {
    "profile": "kernelscope.commands.profile",
    "import": "kernelscope.commands.imports",
    "report": "kernelscope.commands.report",
    "compare": "kernelscope.commands.compare",
    "export": "kernelscope.commands.export",
    "whatif": "kernelscope.commands.whatif",
    "presets": "kernelscope.commands.presets",
    "kernels": "kernelscope.commands.kernels",
    "ncu": "kernelscope.commands.ncu",
    "hw": "kernelscope.commands.hw",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelscope",
        description="Where an LLM inference spends its time, kernel by kernel.",
    )
    parser.add_argument("--version", action="version", version=f"kernelscope {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb, module_name in VERBS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(verb, help=module.HELP, description=module.DESCRIPTION)
        module.add_arguments(p)
        p.set_defaults(run_command=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kernelscope.progress import SILENT, Steps

    steps = SILENT if args.quiet else Steps()
    try:
        return args.run_command(args, steps)
    except UserError as exc:
        print(f"kernelscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelscope: interrupted", file=sys.stderr)
        return 130
