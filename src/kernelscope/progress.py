"""Progress display for long steps (rich on a terminal, silent in tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


class Advance:
    """What a step yields: call it to advance (by n); `total(n)` sets a total learnt once the step has begun (the
    chunks of a trace), `fraction(done, total)` both at once, as readers report."""

    def __init__(self, progress: Progress | None = None, task: int | None = None) -> None:
        self._progress, self._task = progress, task

    def __call__(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def total(self, n: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=n)

    def fraction(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)


class Steps:
    """A sequence of named steps; `step(name, total)` yields an Advance (a callable). `counted`: the step shows a
    bar and a count although its total is given only once it runs."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self._console = console or Console(stderr=True)
        self._enabled = enabled

    @contextmanager
    def step(self, description: str, total: int | None = None, counted: bool = False) -> Iterator[Advance]:
        if not self._enabled:
            yield Advance()
            return
        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total or counted:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=self._console, transient=False) as progress:
            task = progress.add_task(description, total=total)
            try:
                yield Advance(progress, task)
            except BaseException:
                # A failed step leaves no progress line above the error line.
                progress.update(task, visible=False)
                raise
            if progress.tasks[0].total is None:
                progress.update(task, total=1, completed=1)

    def note(self, text: str) -> None:
        if self._enabled:
            self._console.print(text)


SILENT = Steps(enabled=False)
