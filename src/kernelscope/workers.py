"""The fork server that helper processes (trace decoding, figure drawing) start from, with its standard error on
/dev/null: a helper that dies while this process is being interrupted (its semaphores already gone) would
otherwise print a traceback under kernelscope's one-line message. A helper's real errors still reach this
process, through its future."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # multiprocessing is imported by the commands that start helpers, not by every command
    from multiprocessing.context import BaseContext


class Terminated(BaseException):
    """SIGTERM or SIGHUP: unwinds like Ctrl-C, so every staged write and temporary file is cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_held = 0  # depth of signals_held blocks
_pending: list[int] = []  # a signal received while held
_output_in_place = False  # the command's output has been renamed into place: a signal no longer changes its outcome


def raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def start_command() -> None:
    """A command begins (main() may run several in one process, as tests do): nothing is in place or pending."""
    global _output_in_place, _held
    _output_in_place = False
    _held = 0
    _pending.clear()


def mark_output_in_place() -> None:
    """Called inside signals_held, right after a command's output (a new run, an updated run, a written file) was
    renamed into place: that rename is every command's last write, so from now on a signal is ignored and the
    command ends as it succeeded, instead of exiting as interrupted with its whole output left behind. A signal
    held until this block ends is dropped for the same reason."""
    global _output_in_place
    _output_in_place = True
    _pending.clear()


def output_in_place() -> bool:
    return _output_in_place


def deliver_later(signum: int) -> bool:
    """Called by the signal handler (cli.py): True when the signal must wait for the end of a signals_held block
    (it is then raised there)."""
    if _held:
        _pending.append(signum)
        return True
    return False


# Cleanups that must run even when a signal cuts the `finally` that would run them (a signal can land on the first
# line of a finally, before it holds signals): cli._run runs whatever is left here when a signal ends the command.
# Each must be idempotent: it normally runs in its finally as well.
_cleanups: list[Callable[[], None]] = []


def add_cleanup(cleanup: Callable[[], None]) -> None:
    _cleanups.append(cleanup)


def remove_cleanup(cleanup: Callable[[], None]) -> None:
    with suppress(ValueError):
        _cleanups.remove(cleanup)


def run_cleanups() -> None:
    """The cleanups still registered, newest first (a signal ended the command: they are what it left)."""
    while _cleanups:
        cleanup = _cleanups.pop()
        with suppress(Exception):
            cleanup()


@contextmanager
def signals_held() -> Iterator[None]:
    """Delay a SIGINT/SIGTERM/SIGHUP that kernelscope's handler receives until the block ends, so that something
    made in the block (a staging folder, a helper process) is always handed to its cleanup: use the block inside
    the try whose finally cleans up, since the signal is raised as the block ends. Held in Python, not with the
    signal mask: other threads (polars') would take the signal anyway, and processes started here would inherit
    the mask."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            raise_for(signum)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def forkserver_context(preload: list[str]) -> BaseContext:
    import multiprocessing
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preload)  # only heeded by the first start
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        # If interrupted here, the server sees this process end and exits.
        forkserver.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return ctx


def take_index(bounds: Any, from_back: bool) -> int | None:
    """The next item of work shared by processes through a counter pair [front, back] (a multiprocessing Array):
    the parent takes from the front, helpers from the back, until they meet; None when nothing is left."""
    with bounds.get_lock():
        front, back = bounds[0], bounds[1]
        if front >= back:
            return None
        if from_back:
            bounds[1] = back - 1
            return back - 1
        bounds[0] = front + 1
        return front
