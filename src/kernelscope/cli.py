"""Command-line interface: one sub-command per module of kernelscope.commands (each declares its own arguments
and runs itself); errors the user can fix end as one line and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
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


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line (the command, the problem, where help is), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
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


class Terminated(BaseException):
    """SIGTERM or SIGHUP: unwinds like Ctrl-C, so every staged write and temporary file is cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame: object) -> None:
    # A second signal while cleaning up must not cut the cleanup short.
    signal.signal(signum, signal.SIG_IGN)
    raise Terminated(signum)


def _error(text: str) -> None:
    print(f"kernelscope: error: {' '.join(text.split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kernelscope.progress import SILENT, Steps

    # Progress only on a terminal: a log keeps nothing but the result or the one error line.
    steps = SILENT if args.quiet or not sys.stderr.isatty() else Steps()
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread (main() called from a test's thread)
            previous[signum] = signal.signal(signum, _terminate)
    from kernelscope.report import figure_formats

    formats = figure_formats.chosen.set(getattr(args, "figure_formats", None) or figure_formats.DEFAULT)
    try:
        return args.run_command(args, steps)
    except UserError as exc:
        _error(str(exc))
        return 2
    except OSError as exc:  # what the system says of a path: unreadable, read-only, full disk, not a directory
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{exc.strerror or exc}")
        return 2
    except MemoryError:
        _error("out of memory (see docs/guarantees.md for the size limits of inputs)")
        return 2
    except KeyboardInterrupt:
        print("kernelscope: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"kernelscope: terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except Exception as exc:  # a defect of ours: one line unless asked for the traceback
        if os.environ.get("KERNELSCOPE_DEBUG"):
            raise
        _error(f"internal error ({type(exc).__name__}: {exc}); KERNELSCOPE_DEBUG=1 shows the traceback")
        return 1
    finally:
        figure_formats.chosen.reset(formats)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
