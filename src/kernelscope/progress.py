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


class Steps:
    """A sequence of named steps; `step(name, total)` yields an `advance()` callable."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self._console = console or Console(stderr=True)
        self._enabled = enabled

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator:
        if not self._enabled:
            yield lambda n=1: None
            return
        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=self._console, transient=False) as progress:
            task = progress.add_task(description, total=total)
            try:
                yield lambda n=1: progress.advance(task, n)
            except BaseException:
                # A failed step leaves no progress line above the error line.
                progress.update(task, visible=False)
                raise
            if total is None:
                progress.update(task, total=1, completed=1)

    def note(self, text: str) -> None:
        if self._enabled:
            self._console.print(text)


SILENT = Steps(enabled=False)
