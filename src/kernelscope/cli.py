"""Command-line interface: one sub-command per module of kernelscope.commands (each declares its own arguments
and runs itself); errors the user can fix end as one line and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading

from kernelscope import __version__, workers
from kernelscope.allocator import POLARS_ALLOCATOR_CONF, TABLES_ALLOCATOR_CONF, configure_polars_allocator
from kernelscope.errors import UserError
from kernelscope.workers import Terminated

# Verb → the module that implements it (add_arguments(parser), run(args, steps) -> int, HELP, DESCRIPTION).
VERBS = {
    "profile": "kernelscope.commands.profile",
    "import": "kernelscope.commands.imports",
    "report": "kernelscope.commands.report",
    "compare": "kernelscope.commands.compare",
    "query": "kernelscope.commands.query",
    "check": "kernelscope.commands.check",
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


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser of every verb, or of `verb` alone (its module is the only one loaded: a short command such as a
    cached query does not pay for the others')."""
    parser = _OneLineParser(
        prog="kernelscope",
        description="Where an LLM inference spends its time, kernel by kernel.",
    )
    parser.add_argument("--version", action="version", version=f"kernelscope {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in VERBS.items():
        if verb is not None and name != verb:
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION)
        module.add_arguments(p)
        # -q anywhere on the line: after the verb too. SUPPRESS keeps the value given before the verb when the
        # verb's own -q is absent.
        p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
        p.set_defaults(run_command=module.run)
    return parser


QUIET_HELP = "no progress display and no closing summary or headline (results and paths are still printed)"


_received: list[int] = []  # the signal that is ending this command, if any


def _on_signal(signum: int, frame: object) -> None:
    # A second signal while cleaning up must not cut the cleanup short.
    signal.signal(signum, signal.SIG_IGN)
    if workers.output_in_place():  # the command's output is whole and in place: it ends as it succeeded
        return
    _received.append(signum)
    if not workers.deliver_later(signum):  # inside a signals_held block it is raised as the block ends
        workers.raise_for(signum)


def _unraisable(hook_args: object, default=sys.unraisablehook) -> None:
    """A signal whose exception Python had to swallow (raised while it ran a weakref callback or a __del__):
    nothing is printed, and the signal is sent again a moment later, to land in ordinary code."""
    if isinstance(getattr(hook_args, "exc_value", None), KeyboardInterrupt | Terminated) and _received:
        signum = _received.pop()
        signal.signal(signum, _on_signal)
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return
    default(hook_args)


def _interrupted() -> int:
    """One line and the exit code of the signal received (128 + its number)."""
    signum = _received[0]
    if signum == signal.SIGINT:
        print("kernelscope: interrupted", file=sys.stderr)
    else:
        print(f"kernelscope: terminated by {signal.Signals(signum).name}", file=sys.stderr)
    return 128 + signum


def _signal_outside_command(exc: KeyboardInterrupt | Terminated) -> int:
    if not _received:
        _received.append(exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
    workers.run_cleanups()
    return _interrupted()


def _error(text: str) -> None:
    print(f"kernelscope: error: {' '.join(text.split())}", file=sys.stderr)


def entry() -> None:
    """The program (console script and `python -m kernelscope`): main(), then the exit. A signal that arrives
    once the command is over (its output whole, helpers and fork server being shut down) no longer changes the
    outcome: the exit status is the command's."""
    try:
        code = main()
    except (KeyboardInterrupt, Terminated) as exc:
        # A signal outside the command proper: while the verbs' modules load (Python's own SIGINT handler is still
        # in place), or between our handlers' installation and the command's start or after its end.
        code = _signal_outside_command(exc)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away after our last write (`… | head`): nothing more to say
        _stdout_closed()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(code)


# Commands that hold whole traces in memory: Polars' allocator returns their freed pages from a background thread
# (allocator.py).
_TRACE_COMMANDS = frozenset({"import", "profile"})


def _verb(argv: list[str]) -> str | None:
    """The verb of a command line whose words before it are options of the verb-less parser other than help and
    version (those, a missing or unknown verb: None, the whole parser answers)."""
    for word in argv:
        if word in ("-q", "--quiet"):
            continue
        return word if word in VERBS else None
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser(_verb(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    configure_polars_allocator(POLARS_ALLOCATOR_CONF if args.command in _TRACE_COMMANDS else TABLES_ALLOCATOR_CONF)
    from kernelscope.progress import SILENT, Steps

    # Progress only on a terminal: a log keeps nothing but the result or the one error line.
    steps = SILENT if args.quiet or not sys.stderr.isatty() else Steps()
    previous = {}
    _received.clear()
    workers.start_command()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread (main() called from a test's thread)
            if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored by whoever started us: stays so
                previous[signum] = signal.signal(signum, _on_signal)
    previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    from kernelscope.report import figure_formats

    asked = getattr(args, "figure_formats", None)  # () is an answer: no figures
    formats = figure_formats.chosen.set(figure_formats.DEFAULT if asked is None else asked)
    try:
        return _run(args, steps)
    finally:
        sys.unraisablehook = previous_hook
        figure_formats.chosen.reset(formats)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stdout_closed() -> None:
    """Standard output's reader has gone (`kernelscope … | head`): further output, and the flush at exit, go to
    /dev/null instead of raising BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(args: argparse.Namespace, steps: object) -> int:
    """The command, and whatever ends it as one line and an exit code."""
    try:
        return args.run_command(args, steps)
    except BrokenPipeError as exc:
        # The reader of our output stopped reading (`| head` has what it wanted): an ordinary end, not an error.
        # Any other broken pipe (a helper process's) is an error like the rest.
        if not _stdout_broken():
            return _run_failed(exc)
        workers.run_cleanups()
        _stdout_closed()
        return 0
    except KeyboardInterrupt:
        if not _received:
            _received.append(signal.SIGINT)
        workers.run_cleanups()
        return _interrupted()
    except Terminated as exc:
        if not _received:
            _received.append(exc.signum)
        workers.run_cleanups()
        return _interrupted()
    except Exception as exc:
        return _run_failed(exc)


def _stdout_broken() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll says so without writing)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (ValueError, OSError, AttributeError):
        return False


def _run_failed(exc: BaseException) -> int:
    """What ends the command when it raised `exc`."""
    # A signal can surface as another error (a C extension turning the interrupt into its own exception): what
    # ends the command is then the signal.
    if _received:
        workers.run_cleanups()
        return _interrupted()
    if isinstance(exc, UserError):
        _error(str(exc))
        return 2
    if isinstance(exc, OSError):  # what the system says of a path: unreadable, read-only, full disk, …
        _error(f"{exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc.strerror or exc))
        return 2
    if isinstance(exc, MemoryError):
        _error("out of memory (see docs/guarantees.md for the size limits of inputs)")
        return 2
    if os.environ.get("KERNELSCOPE_DEBUG"):
        raise exc
    _error(f"internal error ({type(exc).__name__}: {exc}); KERNELSCOPE_DEBUG=1 shows the traceback")
    return 1
